"""SAC on replay shards, the pure parts: where the registry puts an experiment's replay, which SAC class a
manifest builds, the twin critics' priorities, and the replay budget of SAC's shards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from kuberl.api.algorithms import REGISTRY
from kuberl.api.validation import load_manifest, validate_document
from kuberl.trainer.algorithms.sac import SAC, SACConfig, ShardedSAC
from kuberl.trainer.learners.sac import critic_loss, sac_priorities
from kuberl.trainer.run.memory_budget import replay_memory_errors
from kuberl.trainer.sampling.envs import EnvSpaces
from kuberl_testing.manifests import experiment_manifest

PENDULUM = EnvSpaces(gym.spaces.Box(-8.0, 8.0, (3,), dtype=np.float32), gym.spaces.Box(-2.0, 2.0, (1,)),
                     frame_stack=1)


@pytest.mark.parametrize(("workers", "shards", "placement"), [
    (0, None, "local"), (2, None, "local"), (2, 0, "local"),  # today's SAC: unset or 0 keeps the learner's buffer
    (0, 2, "local"),  # no rollout workers to feed shards (validation refuses this manifest; the placement stays local)
    (1, 1, "shards"), (2, 2, "shards"),
])
def test_sac_keeps_its_replay_in_shards_only_when_asked_with_workers(workers, shards, placement) -> None:
    entry = REGISTRY["sac"]
    assert entry.replay == "local-or-shards" and entry.off_policy
    assert entry.placement(workers, shards) == placement
    assert entry.shard_count(workers, shards) == (shards if placement == "shards" else 1)


def test_the_other_algorithms_keep_their_one_placement() -> None:
    assert REGISTRY["apex-dqn"].placement(0, None) == "shards" and REGISTRY["apex-dqn"].shard_count(0, None) == 1
    assert REGISTRY["apex-dqn"].shard_count(2, 3) == 3
    assert REGISTRY["dqn"].placement(2, 4) == "local" and REGISTRY["dqn"].shard_count(2, 4) == 1
    assert REGISTRY["ppo"].placement(2, None) == "none" and REGISTRY["ppo"].shard_count(2, None) == 0


def _sac(workers: int, shards: int | None) -> SACConfig:
    config = SACConfig().environment("Pendulum-v1").rollouts(workers=workers)
    return config.replay(shards=shards) if shards is not None else config


def test_the_manifest_picks_the_sac_class() -> None:
    assert _sac(0, None).algorithm_class() is SAC
    assert _sac(2, None).algorithm_class() is SAC
    assert _sac(2, 0).algorithm_class() is SAC
    assert _sac(2, 2).algorithm_class() is ShardedSAC


def test_apex_needs_a_shard_and_unset_means_one() -> None:
    base = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "x"},
            "spec": {"algorithm": "apex-dqn", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 10},
                     "rollouts": {"workers": 1}}}
    validate_document(base)  # shards unset: one shard
    base["spec"]["replay"] = {"shards": 0}
    with pytest.raises(Exception, match="spec.replay.shards"):
        validate_document(base)


def test_sac_priorities_are_the_mean_of_the_twin_critics_absolute_errors() -> None:
    q1 = torch.tensor([1.0, -2.0, 0.5, 3.0])
    q2 = torch.tensor([2.0, -1.0, 0.5, -3.0])
    targets = torch.tensor([1.5, 0.0, 0.5, 0.0])
    expected = (np.abs([-0.5, -2.0, 0.0, 3.0]) + np.abs([0.5, -1.0, 0.0, -3.0])) / 2
    np.testing.assert_allclose(sac_priorities(q1, q2, targets).numpy(), expected)
    # one critic right and one wrong still prioritises the sample; both right gives 0
    assert sac_priorities(q1, q2, targets)[0] > 0 and sac_priorities(q1, q2, targets)[2] == 0
    q1.requires_grad_(True)
    _, td_errors = critic_loss(q1, q2, targets)
    assert not td_errors.requires_grad
    np.testing.assert_allclose(td_errors.numpy(), expected)


def _experiment(workers: int, shards: int | None, capacity: int, head: str, pods: str):
    replay = {"capacity": capacity, **({"shards": shards} if shards is not None else {})}
    return load_manifest(experiment_manifest(
        "pendulum", algorithm="sac", env="Pendulum-v1", rollouts={"workers": workers, "fragmentLength": 64},
        replay=replay, head={"memory": head}, workers={"replicas": 2, "memory": pods}, stop={"timesteps": 1000},
    ))


def test_sac_shards_may_live_in_the_worker_pods_and_the_local_buffer_only_in_the_head() -> None:
    # 100M Pendulum transitions: some 6 GB; the head has 4 GiB, each worker pod 16 GiB.
    local = replay_memory_errors(_experiment(2, None, 100_000_000, "4Gi", "16Gi"), PENDULUM, in_cluster=True)
    assert local and "spec.head.memory" in local[0].message and "workers" not in local[0].message
    assert replay_memory_errors(_experiment(2, 2, 100_000_000, "4Gi", "16Gi"), PENDULUM, in_cluster=True) == []
