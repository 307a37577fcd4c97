"""SAC: the squashed Gaussian's log-density against torch.distributions and a numerical integral, the losses
against step-by-step numpy references on hand-made tensors, the learner's update and checkpoint, and the
algorithm in-process (bounded actions, save and restore, the exported policy, refusing discrete actions)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import AffineTransform, Independent, Normal, TanhTransform, TransformedDistribution

from kuberl.api.hyperparams import SACParams
from kuberl.api.validation import validate_document
from kuberl.trainer.algorithms.sac import SACConfig
from kuberl.trainer.learners.sac import (
    actor_loss,
    alpha_loss,
    build_sac_learner,
    critic_loss,
    critic_targets,
    polyak_update,
)
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.sac_networks import (
    SquashedGaussianActor,
    TwinQ,
    box_scale_bias,
    log_one_minus_tanh_squared,
    squashed_log_prob,
)
from kuberl.trainer.run.checks import env_errors

BOX = gym.spaces.Box(np.array([-2.0, 0.0], dtype=np.float32), np.array([2.0, 1.0], dtype=np.float32))


# -- the squashed Gaussian -------------------------------------------------------------------------
def test_log_one_minus_tanh_squared_is_exact_and_finite_where_the_naive_form_is_not() -> None:
    u = torch.tensor([-3.0, -0.5, 0.0, 0.7, 2.5], dtype=torch.float64)
    assert torch.allclose(log_one_minus_tanh_squared(u), torch.log(1 - torch.tanh(u) ** 2), atol=1e-10)
    far = torch.tensor([-30.0, 30.0])
    assert torch.isinf(torch.log(1 - torch.tanh(far) ** 2)).all()  # float32 tanh rounds to 1
    # log(1 - tanh^2 u) = log 4 - 2|u| - 2 log(1 + e^-2|u|) ~ log 4 - 60 here
    assert torch.allclose(log_one_minus_tanh_squared(far), torch.full((2,), np.log(4.0) - 60.0), atol=1e-4)


def test_squashed_log_prob_matches_torchs_transformed_distribution() -> None:
    torch.manual_seed(0)
    mean = torch.randn(6, 2, dtype=torch.float64)
    log_std = 0.3 * torch.randn(6, 2, dtype=torch.float64)
    u = mean + log_std.exp() * torch.randn(6, 2, dtype=torch.float64)
    scale, bias = (torch.as_tensor(x, dtype=torch.float64) for x in box_scale_bias(BOX))
    reference = TransformedDistribution(Independent(Normal(mean, log_std.exp()), 1),
                                        [TanhTransform(), AffineTransform(bias, scale)])
    action = scale * torch.tanh(u) + bias
    assert torch.allclose(squashed_log_prob(u, mean, log_std, scale), reference.log_prob(action), atol=1e-8)


def test_squashed_density_integrates_to_one_over_the_box() -> None:
    """Change of variables checked numerically: the density of a = 2 tanh(u) + 0 on (-2, 2) has mass 1."""
    scale = torch.tensor([2.0], dtype=torch.float64)
    mean, log_std = torch.tensor([[0.4]], dtype=torch.float64), torch.tensor([[0.2]], dtype=torch.float64)
    a = torch.linspace(-2.0, 2.0, 400_001, dtype=torch.float64)[1:-1]
    u = torch.atanh(a / 2.0).unsqueeze(-1)
    density = squashed_log_prob(u, mean, log_std, scale).exp()
    assert torch.trapezoid(density, a).item() == pytest.approx(1.0, abs=1e-4)


def test_actor_samples_lie_in_the_box_and_greedy_is_the_squashed_mean() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(gym.spaces.Box(-1, 1, (3,)), BOX, EncoderSpec((16,), "relu"))
    obs = 5 * torch.randn(500, 3)
    action, logp = actor.sample(obs)
    assert action.shape == (500, 2) and logp.shape == (500,) and torch.isfinite(logp).all()
    assert (action[:, 0].abs() <= 2).all() and ((action[:, 1] >= 0) & (action[:, 1] <= 1)).all()
    mean, _ = actor(obs)
    assert torch.allclose(actor.greedy(obs), actor.scale * torch.tanh(mean) + actor.bias)


def test_discrete_and_unbounded_action_spaces_are_refused_by_the_networks() -> None:
    with pytest.raises(ValueError, match="Box"):
        box_scale_bias(gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="finite"):
        box_scale_bias(gym.spaces.Box(-np.inf, np.inf, (2,)))


def test_image_observations_use_the_conv_encoder() -> None:
    image = gym.spaces.Box(0, 255, (2, 20, 20), dtype=np.uint8)
    spec = EncoderSpec((8,), "relu", conv=((4, 4, 2), (8, 3, 2)), conv_hidden=(16,))
    actor, twin = SquashedGaussianActor(image, BOX, spec), TwinQ(image, BOX, spec)
    obs = torch.randint(0, 255, (5, 2, 20, 20), dtype=torch.uint8)
    action, _ = actor.sample(obs)
    q1, q2 = twin(obs, action)
    assert action.shape == (5, 2) and q1.shape == q2.shape == (5,)


# -- the losses against numpy, step by step ---------------------------------------------------------
REWARD = np.array([1.0, -0.5, 0.0, 2.0])
DISCOUNT = np.array([0.99, 0.0, 0.9801, 0.99])  # the second terminated; the third is a 2-step transition
NEXT_Q1 = np.array([10.0, 3.0, -1.0, 0.5])
NEXT_Q2 = np.array([9.0, 4.0, -2.0, 0.7])
NEXT_LOGP = np.array([-1.0, 0.5, 0.2, -3.0])
ALPHA = 0.2


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float64)


def test_critic_targets_match_a_step_by_step_reference() -> None:
    expected = np.empty(4)
    for i in range(4):
        soft_value = min(NEXT_Q1[i], NEXT_Q2[i]) - ALPHA * NEXT_LOGP[i]
        expected[i] = REWARD[i] + DISCOUNT[i] * soft_value
    got = critic_targets(_t(REWARD), _t(DISCOUNT), _t(NEXT_Q1), _t(NEXT_Q2), _t(NEXT_LOGP), ALPHA)
    np.testing.assert_allclose(got.numpy(), expected)
    assert got[1].item() == -0.5  # terminal: the reward alone


def test_critic_loss_and_priorities_match_a_step_by_step_reference() -> None:
    q1, q2 = np.array([1.0, 0.0, 2.0, -1.0]), np.array([1.5, -0.5, 2.0, 0.0])
    targets, weights = np.array([0.5, 0.0, 1.0, 1.0]), np.array([1.0, 0.5, 0.25, 1.0])
    loss1 = sum(weights[i] * (q1[i] - targets[i]) ** 2 for i in range(4)) / 4
    loss2 = sum(weights[i] * (q2[i] - targets[i]) ** 2 for i in range(4)) / 4
    loss, td = critic_loss(_t(q1), _t(q2), _t(targets), _t(weights))
    assert loss.item() == pytest.approx(loss1 + loss2)
    np.testing.assert_allclose(td.numpy(), [(abs(q1[i] - targets[i]) + abs(q2[i] - targets[i])) / 2 for i in range(4)])
    unweighted, _ = critic_loss(_t(q1), _t(q2), _t(targets))
    assert unweighted.item() == pytest.approx(np.mean((q1 - targets) ** 2) + np.mean((q2 - targets) ** 2))


def test_actor_loss_matches_a_step_by_step_reference() -> None:
    logp, q1, q2 = np.array([-1.0, 0.3, 2.0]), np.array([5.0, -1.0, 0.0]), np.array([4.0, -2.0, 1.0])
    expected = sum(ALPHA * logp[i] - min(q1[i], q2[i]) for i in range(3)) / 3
    assert actor_loss(_t(logp), _t(q1), _t(q2), ALPHA).item() == pytest.approx(expected)


def test_alpha_loss_value_and_the_direction_it_moves_alpha() -> None:
    target_entropy = -1.0
    log_alpha = torch.tensor(np.log(0.5), dtype=torch.float64, requires_grad=True)
    logp = np.array([0.5, 2.0, 1.5])  # entropy -logp ~ -1.33 < target -1: too little, alpha must grow
    loss = alpha_loss(log_alpha, _t(logp), target_entropy)
    expected = -sum(np.log(0.5) * (logp[i] + target_entropy) for i in range(3)) / 3
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert log_alpha.grad.item() < 0  # gradient descent raises log alpha
    log_alpha.grad = None
    alpha_loss(log_alpha, _t(np.array([-3.0, -2.0])), target_entropy).backward()
    assert log_alpha.grad.item() > 0  # entropy above the target: alpha shrinks


def test_polyak_update_matches_a_step_by_step_reference() -> None:
    target, online = [torch.tensor([1.0, 2.0]), torch.tensor([[0.0]])], [torch.tensor([3.0, -2.0]), torch.tensor([[1.0]])]
    polyak_update(target, online, tau=0.25)
    assert target[0].tolist() == [1.0 * 0.75 + 3.0 * 0.25, 2.0 * 0.75 - 2.0 * 0.25]
    assert target[1].item() == 0.25


# -- the learner ------------------------------------------------------------------------------------
def _batch(rng: np.random.Generator, n: int = 32) -> dict[str, np.ndarray]:
    return {
        "obs": rng.normal(size=(n, 3)).astype(np.float32), "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32), "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
        "discount": np.full(n, 0.99, dtype=np.float32), "weights": np.ones(n, dtype=np.float32),
    }


def test_learner_update_moves_targets_by_tau_tunes_alpha_and_checkpoints() -> None:
    torch.manual_seed(0)
    obs_space, act_space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))
    params = SACParams(hidden=[16], tau=0.1)
    learner = build_sac_learner(obs_space, act_space, params, torch.device("cpu"))
    assert learner.target_entropy == -2.0 and learner.alpha == pytest.approx(1.0)
    before = [p.clone() for p in learner.critic_target.parameters()]
    td = learner.update(_batch(np.random.default_rng(0)))
    assert td.shape == (32,) and (td >= 0).all()
    for old, target, online in zip(before, learner.critic_target.parameters(), learner.critic.parameters(),
                                   strict=True):
        assert torch.allclose(target, 0.9 * old + 0.1 * online, atol=1e-6)
    assert learner.alpha != 1.0
    stats = learner.take_stats()
    assert stats["updates"] == 1 and stats["criticLoss"] is not None and stats["alpha"] == learner.alpha

    files = learner.state_files()
    fresh = build_sac_learner(obs_space, act_space, params, torch.device("cpu"))
    fresh.load_state_files(files)
    assert fresh.alpha == learner.alpha and fresh.updates == 1
    batch = _batch(np.random.default_rng(1))
    torch.manual_seed(5)
    expected = learner.update(batch)
    torch.manual_seed(5)
    np.testing.assert_allclose(fresh.update(batch), expected, rtol=1e-6)  # optimizer state came back too


# -- the algorithm in-process -----------------------------------------------------------------------
def _config() -> SACConfig:
    return (SACConfig().environment("Pendulum-v1").rollouts(workers=0, envs_per_worker=4, fragment_length=25)
            .training(hidden=[32], learning_starts=200, train_batch_size=64).debugging(seed=2))


def test_sac_trains_in_process_and_restores_to_the_same_policy(tmp_path) -> None:
    algo = _config().build()
    for _ in range(4):
        result = algo.train()
    assert result["timesteps"] == 400 and result["learner"]["updates"] == 300  # from the iteration that reached learningStarts
    assert result["replay"]["shard_0"]["size"] == 400
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    greedy = algo.compute_actions(obs)
    assert greedy.shape == (16, 1) and np.abs(greedy).max() <= 2.0
    np.testing.assert_array_equal(greedy, algo.compute_actions(obs))  # deterministic without exploring
    assert not np.array_equal(algo.compute_actions(obs, explore=True), algo.compute_actions(obs, explore=True))
    with torch.no_grad():
        exported = algo.policy_module()(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(exported, greedy, rtol=1e-6)
    uri = algo.save(tmp_path)
    credit = algo.local_replay.update_credit
    algo.stop()

    fresh = _config().build()
    fresh.restore(uri)
    np.testing.assert_array_equal(fresh.compute_actions(obs), greedy)
    assert fresh.timesteps == 400 and fresh.learner.updates == 300
    assert fresh.local_replay.update_credit == credit
    assert fresh.train()["timesteps"] == 500
    fresh.stop()


def test_sac_on_discrete_actions_is_refused() -> None:
    experiment = validate_document({
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "x"},
        "spec": {"algorithm": "sac", "env": {"id": "CartPole-v1"}, "stop": {"iterations": 1}},
    })
    (error,) = env_errors(experiment)
    assert error.path == "spec.algorithm"
    assert "Discrete" in error.message and "sac needs Box actions" in error.message and "dqn" in error.message
