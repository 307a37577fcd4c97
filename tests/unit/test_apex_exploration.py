"""Ape-X's per-worker exploration (the warm-up to each worker's own epsilon) and the learner's update
against a plain double-DQN reference, without Ray."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from kuberl.api.hyperparams import ApexDQNParams
from kuberl.trainer.algorithms.apex import apex_epsilons, worker_epsilon
from kuberl.trainer.distributed.shard_worker import ShardRolloutWorker, TransitionSettings
from kuberl.trainer.learners.q import QLearner
from kuberl.trainer.models.q_network import QNetwork
from kuberl.trainer.sampling.policies import QPolicyFactory
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.rollout_worker import WorkerConfig


def _worker(settings: PolicySettings) -> ShardRolloutWorker:
    params = ApexDQNParams(seed=1)
    config = WorkerConfig("CartPole-v1", num_envs=2, fragment_length=16, seed=1)
    return ShardRolloutWorker(config, QPolicyFactory.from_params(params), 1, settings,
                              transitions=TransitionSettings(gamma=0.99, n_step=3), learner=None)


def test_each_worker_warms_up_from_epsilon_start_to_its_own_epsilon_over_the_runs_env_steps() -> None:
    assert worker_epsilon(0.01, 0, 1.0, 1_000) == 1.0
    assert worker_epsilon(0.01, 500, 1.0, 1_000) == pytest.approx(0.505)
    assert worker_epsilon(0.01, 5_000, 1.0, 1_000) == pytest.approx(0.01)
    worker = _worker(PolicySettings(epsilon=worker_epsilon(0.01, 0, 1.0, 1_000)))
    assert worker.worker.policy.epsilon == 1.0
    worker._configure(PolicySettings(epsilon=worker_epsilon(0.01, 500, 1.0, 1_000)))  # what the driver sends with run()
    assert worker.worker.policy.epsilon == pytest.approx(0.505)


def test_after_the_warm_up_a_worker_keeps_its_own_epsilon() -> None:
    own = apex_epsilons(2, 0.1)[1]
    worker = _worker(PolicySettings(epsilon=worker_epsilon(own, 20_000, 1.0, 10_000)))
    assert worker.worker.policy.epsilon == pytest.approx(0.1**8)


def test_the_learner_follows_a_plain_double_dqn_reference() -> None:
    """n-step double DQN, Huber loss, importance weights, Adam, grad clip and hard target syncs, written out."""
    params = ApexDQNParams(hidden=[32, 32], lr=1e-3, target_update_interval=5, grad_clip=10.0, dueling=False)
    torch.manual_seed(0)
    learner = QLearner(QNetwork(4, 2, [32, 32], "relu", dueling=False), params, torch.device("cpu"))
    online = copy.deepcopy(learner.online)
    target = copy.deepcopy(online)
    optimizer = torch.optim.Adam(online.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    for _ in range(20):
        batch = {
            "obs": rng.normal(size=(64, 4)).astype(np.float32), "action": rng.integers(0, 2, 64),
            "reward": rng.uniform(0, 3, 64).astype(np.float32), "next_obs": rng.normal(size=(64, 4)).astype(np.float32),
            "discount": rng.choice([0.0, 0.99**3], 64).astype(np.float32),
            "weights": rng.uniform(0.1, 1, 64).astype(np.float32),
        }
        td = learner.update(batch)
        t = {k: torch.as_tensor(v) for k, v in batch.items()}
        q = online(t["obs"]).gather(1, t["action"].long()[:, None])[:, 0]
        with torch.no_grad():
            best = online(t["next_obs"]).argmax(1, keepdim=True)
            y = t["reward"] + t["discount"] * target(t["next_obs"]).gather(1, best)[:, 0]
        loss = (nn.functional.huber_loss(q, y, reduction="none") * t["weights"]).mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), 10.0)
        optimizer.step()
        if learner.updates % 5 == 0:
            target.load_state_dict(online.state_dict())
        np.testing.assert_allclose(td, (y - q).abs().detach().numpy(), rtol=1e-4, atol=1e-5)
    for mine, theirs in zip(learner.online.parameters(), online.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)
    for mine, theirs in zip(learner.target.parameters(), target.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)


def test_apex_keeps_the_importance_exponent_at_its_start_while_dqn_anneals_it_to_one() -> None:
    from kuberl.api.hyperparams import DQNParams
    from kuberl.trainer.learning.schedules import priority_beta

    def beta(p: DQNParams, timesteps: int) -> float:
        return priority_beta(timesteps, p.priority_beta, p.priority_beta_timesteps, p.priority_beta_final)

    apex, dqn = ApexDQNParams(), DQNParams()
    assert beta(apex, 0) == beta(apex, 10**7) == pytest.approx(0.4)
    assert beta(dqn, 0) == pytest.approx(0.4) and beta(dqn, dqn.priority_beta_timesteps // 2) == pytest.approx(0.7)
    assert beta(dqn, 10**7) == pytest.approx(1.0)
