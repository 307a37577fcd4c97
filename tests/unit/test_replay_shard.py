"""ReplayShard's API without Ray (the actor wraps this class unchanged), and workers' local priorities."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kuberl.trainer.models.q_network import QNetwork
from kuberl.trainer.replay.nstep import local_priorities
from kuberl.trainer.replay.shard import ReplayShard
from kuberl.trainer.sampling.policies import QPolicy


def _transitions(n: int, start: int = 0) -> dict[str, np.ndarray]:
    return {"obs": np.arange(start, start + n, dtype=np.float32)[:, None], "action": np.zeros(n, dtype=np.int64)}


def test_shard_answers_none_until_it_holds_enough_then_prioritized_samples() -> None:
    shard = ReplayShard(0, 100, alpha=1.0, eps=0.0, seed=1)
    assert shard.add(_transitions(10), np.ones(10)) == 10
    batch, adds = shard.sample(32, beta=0.4, min_size=16)
    assert batch is None and adds == 10
    shard.add(_transitions(10, start=10), np.r_[np.zeros(9), [5.0]])
    batch, adds = shard.sample(64, beta=0.4, min_size=16)
    assert adds == 20 and batch is not None and len(batch["ids"]) == 64
    assert (batch["obs"][:, 0] < 10).mean() == pytest.approx(10 / 15, abs=0.15)  # 10 of 15 priority mass
    assert set(batch["obs"][batch["obs"][:, 0] >= 10, 0].tolist()) <= {19.0}
    assert shard.update_priorities(batch["ids"], np.ones(64)) == 0
    assert shard.stats()["samples"] == 64


def test_uniform_shard() -> None:
    shard = ReplayShard(1, 8, prioritized=False, seed=0)
    shard.add(_transitions(12), None)
    batch, adds = shard.sample(16, beta=1.0)
    assert adds == 12 and (batch["weights"] == 1).all()
    assert set(batch["obs"][:, 0].tolist()) <= set(range(4, 12))


def test_local_priorities_are_the_workers_own_n_step_td_errors() -> None:
    torch.manual_seed(0)
    network = QNetwork(2, 2, [8], "relu", dueling=False)
    policy = QPolicy(network, 2, seed=0)
    next_obs = np.array([[0.5, -1.0], [1.0, 2.0]], dtype=np.float32)
    transitions = {
        "reward": np.array([1.0, 2.0], dtype=np.float32), "discount": np.array([0.9, 0.0], dtype=np.float32),
        "next_obs": next_obs, "q_taken": np.array([0.3, -0.5], dtype=np.float32),
    }
    next_max = policy.q_values(next_obs).max(axis=1)
    expected = np.abs(np.array([1.0 + 0.9 * next_max[0], 2.0]) - np.array([0.3, -0.5]))
    assert local_priorities(policy, transitions) == pytest.approx(expected, rel=1e-5)


def test_priorities_for_slots_overwritten_since_sampling_are_dropped() -> None:
    # The learner's priorities come back after the shard went on adding: a slot may hold a newer
    # transition by then, which must keep its own priority.
    shard = ReplayShard(0, 8, alpha=1.0, eps=0.0, seed=2)
    shard.add(_transitions(8), np.ones(8))
    batch, _ = shard.sample(16, beta=0.4)
    sampled = np.unique(batch["ids"])
    shard.add(_transitions(4, start=8), np.full(4, 1.0))  # ids 8-11 take the slots of ids 0-3
    overwritten = sampled < 4
    assert overwritten.any() and (~overwritten).any()
    dropped = shard.update_priorities(sampled, np.full(len(sampled), 1000.0))
    assert dropped == overwritten.sum()
    assert shard.stats()["droppedPriorityUpdates"] == dropped
    later, _ = shard.sample(4000, beta=0.4)
    newer = later["obs"][:, 0] >= 8  # ids 8-11 kept priority 1, next to the 1000s of the live sampled ids
    assert newer.mean() < 0.05, newer.mean()
    assert set(later["ids"][later["ids"] < 4].tolist()) == set()
