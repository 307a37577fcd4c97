"""The rollout workers' sampling policies draw their noise from generators of their own: never from torch's or
numpy's global one (in-process sampling shares its process with the learner), and a seed picks the draws."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from kuberl.trainer.models.actor_critic import Actor
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.weights import state_dict_to_numpy
from kuberl.trainer.sampling.policies import (
    PolicyHeadFactory,
    PPOPolicyFactory,
    PPOSamplingPolicy,
    QPolicyFactory,
    SACPolicyFactory,
)

VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
FRAMES = gym.spaces.Box(0, 255, (2, 36, 36), np.uint8)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
MLP = EncoderSpec((16,), "tanh")
SMALL_CONV = EncoderSpec((16,), "relu", conv=((4, 4, 2), (8, 3, 2)), conv_hidden=(16,))

# (factory, observation space, action space): every sampling policy the rollout workers run.
POLICIES: dict[str, tuple[Callable[..., Any], gym.Space, gym.Space]] = {
    "ppo-numpy-discrete": (PPOPolicyFactory(MLP), VECTOR, DISCRETE),
    "ppo-numpy-box": (PPOPolicyFactory(MLP), VECTOR, BOX),
    "ppo-torch-images": (PPOPolicyFactory(SMALL_CONV), FRAMES, DISCRETE),
    "q-epsilon-greedy": (QPolicyFactory(MLP, dueling=False), VECTOR, DISCRETE),
    "impala-discrete": (PolicyHeadFactory(MLP), VECTOR, DISCRETE),
    "impala-box": (PolicyHeadFactory(MLP), VECTOR, BOX),
    "sac": (SACPolicyFactory(MLP), VECTOR, BOX),
}


def _observations(space: gym.Space, n: int = 64) -> np.ndarray:
    space.seed(0)
    return np.stack([space.sample() for _ in range(n)])


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_building_and_sampling_leave_torchs_and_numpys_global_generators_alone(name: str) -> None:
    factory, obs_space, action_space = POLICIES[name]
    obs = _observations(obs_space)
    actor_weights = state_dict_to_numpy(Actor(obs_space, action_space, MLP.hidden, MLP.activation, MLP))
    torch.manual_seed(123)
    np.random.seed(123)
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    policy = factory(obs_space, action_space, 7)
    if isinstance(policy, PPOSamplingPolicy):  # the numpy actor has no weights until the learner sends some
        policy.set_weights(actor_weights)
    policy.compute_actions(obs, True)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], numpy_state[1])


@pytest.mark.parametrize("action_space", [DISCRETE, BOX], ids=["discrete", "box"])
def test_impala_sampler_draws_are_set_by_its_seed_alone(action_space: gym.Space) -> None:
    obs = _observations(VECTOR, 256)
    first = PolicyHeadFactory(MLP)(VECTOR, action_space, 1)
    weights = state_dict_to_numpy(first.head)

    def actions(seed: int) -> np.ndarray:
        policy = PolicyHeadFactory(MLP)(VECTOR, action_space, seed)
        policy.set_weights(weights)
        torch.manual_seed(0)  # the global generator in the same state for every policy: it must not matter
        return policy.compute_actions(obs, True)[0]

    np.testing.assert_array_equal(actions(1), actions(1))
    assert not np.array_equal(actions(1), actions(2))
