"""The actor's written-out log-probabilities and entropies agree with torch.distributions; numpy inference too."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from kuberl.trainer.models.actor_critic import Actor
from kuberl.trainer.models.numpy_mlp import NumpyMLP
from kuberl.trainer.models.weights import state_dict_to_numpy
from kuberl.trainer.sampling.policies import PPOSamplingPolicy

OBS = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)


def test_discrete_log_prob_and_entropy_match_categorical() -> None:
    torch.manual_seed(0)
    actor = Actor(OBS, gym.spaces.Discrete(4), [16], "tanh")
    torch.nn.init.normal_(actor.net[-1].weight)  # a non-uniform policy
    obs, actions = torch.randn(10, 3), torch.randint(0, 4, (10,))
    logp, entropy = actor.log_prob_entropy(obs, actions)
    dist = Categorical(logits=actor.net(obs))
    assert torch.allclose(logp, dist.log_prob(actions), atol=1e-6)
    assert torch.allclose(entropy, dist.entropy(), atol=1e-6)


def test_gaussian_log_prob_and_entropy_match_normal() -> None:
    torch.manual_seed(1)
    actor = Actor(OBS, gym.spaces.Box(-2.0, 2.0, shape=(2,)), [16], "relu")
    with torch.no_grad():
        actor.log_std.copy_(torch.tensor([-0.5, 0.3]))
    obs, actions = torch.randn(10, 3), torch.randn(10, 2)
    logp, entropy = actor.log_prob_entropy(obs, actions)
    dist = Normal(actor.net(obs), actor.log_std.exp())
    assert torch.allclose(logp, dist.log_prob(actions).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, dist.entropy().sum(-1), atol=1e-6)


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, shape=(2,))])
def test_numpy_sampling_policy_matches_the_torch_actor(action_space: gym.Space) -> None:
    torch.manual_seed(2)
    actor = Actor(OBS, action_space, [8, 8], "tanh")
    torch.nn.init.normal_(actor.net[-1].weight)
    policy = PPOSamplingPolicy(OBS, action_space, seed=0, activation="tanh")
    policy.set_weights(state_dict_to_numpy(actor))
    obs = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    actions, extras = policy.compute_actions(obs, explore=True)
    logp, _ = actor.log_prob_entropy(torch.as_tensor(obs), torch.as_tensor(actions))
    np.testing.assert_allclose(extras["logp"], logp.detach().numpy(), atol=1e-5)
    greedy, _ = policy.compute_actions(obs, explore=False)
    np.testing.assert_allclose(greedy, actor.greedy(torch.as_tensor(obs)).detach().numpy(), atol=1e-5)


def test_numpy_mlp_equals_torch_forward() -> None:
    actor = Actor(OBS, gym.spaces.Discrete(2), [5, 7], "relu")
    mlp = NumpyMLP("relu")
    mlp.load(state_dict_to_numpy(actor), prefix="net.")
    obs = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(mlp(obs), actor.net(torch.as_tensor(obs)).detach().numpy(), atol=1e-5)
