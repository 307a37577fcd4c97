"""n-step returns, double-DQN targets, Huber loss and schedules against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kuberl.trainer.algorithms.apex import apex_epsilons
from kuberl.trainer.learners.q import q_targets, weighted_td_loss
from kuberl.trainer.learning.schedules import linear_schedule
from kuberl.trainer.replay.nstep import nstep_transitions


def fragment(obs, actions, rewards, next_obs, terminateds, truncateds) -> dict:
    return {"obs": obs, "actions": actions, "rewards": rewards, "next_obs": next_obs, "terminateds": terminateds,
            "truncateds": truncateds}


def _one_env(rewards, terminated, truncated, n, gamma=0.5):
    steps = len(rewards)
    obs = np.arange(steps, dtype=np.float32).reshape(steps, 1, 1)
    next_obs = obs + 100  # the observation after step t is 100 + t
    col = lambda x: np.asarray(x).reshape(steps, 1)  # noqa: E731
    return nstep_transitions(fragment(obs, col(np.arange(steps)), col(rewards), next_obs, col(terminated),
                                      col(truncated)), gamma=gamma, n=n)


def test_three_step_returns_inside_one_episode() -> None:
    out = _one_env([1, 2, 4, 8, 16], [0] * 5, [0] * 5, n=3)
    # t=0: 1 + 0.5*2 + 0.25*4 = 3; t=1: 2 + 2 + 2 = 6; t=2: 4 + 4 + 4 = 12
    # t=3 and t=4 reach the end of the fragment: 8 + 8 = 16 (2 steps), 16 (1 step)
    assert out["reward"] == pytest.approx([3, 6, 12, 16, 16])
    assert out["discount"] == pytest.approx([0.125, 0.125, 0.125, 0.25, 0.5])
    assert out["next_obs"][:, 0] == pytest.approx([102, 103, 104, 104, 104])
    assert out["obs"][:, 0] == pytest.approx([0, 1, 2, 3, 4])
    assert out["action"].tolist() == [0, 1, 2, 3, 4]


def test_terminated_episode_does_not_bootstrap_and_does_not_leak_into_the_next() -> None:
    # the episode terminates at step 1; step 2 starts a new one
    out = _one_env([1, 2, 4, 8], [0, 1, 0, 0], [0, 0, 0, 0], n=3)
    assert out["reward"] == pytest.approx([1 + 0.5 * 2, 2, 4 + 0.5 * 8, 8])
    assert out["discount"] == pytest.approx([0.0, 0.0, 0.25, 0.5])
    assert out["next_obs"][:2, 0] == pytest.approx([101, 101])


def test_truncated_episode_bootstraps_from_its_final_observation() -> None:
    out = _one_env([1, 2, 4, 8], [0, 0, 0, 0], [0, 1, 0, 0], n=3)
    assert out["reward"] == pytest.approx([2, 2, 8, 8])
    assert out["discount"] == pytest.approx([0.25, 0.5, 0.25, 0.5])
    assert out["next_obs"][:, 0] == pytest.approx([101, 101, 103, 103])


def test_one_step_is_plain_td() -> None:
    out = _one_env([1, 2, 3], [0, 0, 1], [0, 0, 0], n=1, gamma=0.9)
    assert out["reward"] == pytest.approx([1, 2, 3])
    assert out["discount"] == pytest.approx([0.9, 0.9, 0.0])


def test_many_envs_are_independent_and_time_major() -> None:
    rng = np.random.default_rng(0)
    steps, envs = 6, 3
    rewards = rng.random((steps, envs))
    terminated = rng.random((steps, envs)) < 0.3
    truncated = np.zeros((steps, envs), dtype=bool)
    obs = rng.random((steps, envs, 2))
    next_obs = rng.random((steps, envs, 2))
    batched = nstep_transitions(fragment(obs, np.zeros((steps, envs)), rewards, next_obs, terminated, truncated),
                                gamma=0.9, n=2)
    for e in range(envs):
        single = nstep_transitions(fragment(
            obs[:, e : e + 1], np.zeros((steps, 1)), rewards[:, e : e + 1], next_obs[:, e : e + 1],
            terminated[:, e : e + 1], truncated[:, e : e + 1]), gamma=0.9, n=2)
        for key in ("reward", "discount", "next_obs"):
            assert batched[key].reshape(steps, envs, -1)[:, e].squeeze() == pytest.approx(single[key].squeeze())


def test_double_dqn_target_uses_the_online_argmax() -> None:
    reward = torch.tensor([1.0, 0.5])
    discount = torch.tensor([0.9, 0.0])
    next_q_online = torch.tensor([[1.0, 3.0], [5.0, 0.0]])
    next_q_target = torch.tensor([[10.0, 2.0], [4.0, 7.0]])
    # online picks action 1 (row 0): 1 + 0.9 * 2 = 2.8; row 1 terminates: 0.5
    assert q_targets(reward, discount, next_q_target, next_q_online).tolist() == pytest.approx([2.8, 0.5])
    # plain DQN takes the target's own max: 1 + 0.9 * 10 = 10
    assert q_targets(reward, discount, next_q_target).tolist() == pytest.approx([10.0, 0.5])


def test_weighted_td_loss() -> None:
    q = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    targets = torch.tensor([0.5, 3.0, -2.0])
    weights = torch.tensor([1.0, 0.5, 0.25])
    loss, td = weighted_td_loss(q, targets, weights)
    # huber: 0.5*0.5^2 = 0.125; |3|-0.5 = 2.5; |-2|-0.5 = 1.5
    assert loss.item() == pytest.approx((0.125 + 0.5 * 2.5 + 0.25 * 1.5) / 3)
    assert td.tolist() == pytest.approx([0.5, 3.0, -2.0])
    loss.backward()
    assert q.grad.tolist() == pytest.approx([-0.5 / 3, -0.5 / 3, 0.25 / 3])


def test_weighted_squared_loss() -> None:
    q = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    targets = torch.tensor([0.5, 3.0, -2.0])
    weights = torch.tensor([1.0, 0.5, 0.25])
    loss, td = weighted_td_loss(q, targets, weights, kind="mse")
    assert loss.item() == pytest.approx((0.25 + 0.5 * 9.0 + 0.25 * 4.0) / 3)
    assert td.tolist() == pytest.approx([0.5, 3.0, -2.0])
    loss.backward()  # the gradient grows with the error: -2 * w * td / n
    assert q.grad.tolist() == pytest.approx([-1.0 / 3, -3.0 / 3, 1.0 / 3])


def test_schedules() -> None:
    assert linear_schedule(0, 1.0, 0.1, 100) == 1.0
    assert linear_schedule(50, 1.0, 0.1, 100) == pytest.approx(0.55)
    assert linear_schedule(1000, 1.0, 0.1, 100) == pytest.approx(0.1)
    eps = apex_epsilons(4)
    assert eps[0] == pytest.approx(0.4)
    assert eps[-1] == pytest.approx(0.4**8)
    assert eps[1] == pytest.approx(0.4 ** (1 + 7 / 3))
    assert apex_epsilons(1) == [0.4]
    assert apex_epsilons(0) == []
