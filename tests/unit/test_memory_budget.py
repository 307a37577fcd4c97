"""The replay memory budget checked before training: pure parts (quantities, packing) and the refusal's numbers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from kuberl.api.algorithms import REGISTRY
from kuberl.api.validation import load_manifest
from kuberl.trainer.replay.buffers import split_capacity
from kuberl.trainer.replay.memory import FrameLayout, replay_bytes
from kuberl.trainer.run.memory_budget import MemoryPlace, pack, quantity_bytes, replay_memory_errors
from kuberl.trainer.sampling.envs import EnvSpaces

ATARI = EnvSpaces(gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8), gym.spaces.Discrete(6), frame_stack=4)
GIB = 2**30


def experiment(algorithm: str = "apex-dqn", capacity: int = 1_000_000, shards: int = 2, head: str = "4Gi",
               workers: str = "8Gi", replicas: int = 2, fragment: int = 64):
    # an on-policy algorithm keeps no replay: its replay settings are refused as having no effect
    replay = f"{{shards: {shards}, capacity: {capacity}}}" if REGISTRY[algorithm].off_policy else "{}"
    text = f"""
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {{name: pong}}
spec:
  algorithm: {algorithm}
  env: {{id: CartPole-v1}}
  rollouts: {{workers: 2, fragmentLength: {fragment}}}
  replay: {replay}
  head: {{memory: {head}}}
  workers: {{replicas: {replicas}, memory: {workers}}}
  stop: {{timesteps: 1000}}
"""
    return load_manifest(text)


@pytest.mark.parametrize(("quantity", "expected"), [
    ("4Gi", 4 * GIB), ("512Mi", 512 * 2**20), ("1.5G", 1_500_000_000), ("100k", 100_000), (2048, 2048), ("7", 7),
])
def test_quantity_bytes(quantity, expected) -> None:
    assert quantity_bytes(quantity) == expected


def test_quantity_bytes_refuses_what_is_not_one() -> None:
    with pytest.raises(ValueError, match="quantity"):
        quantity_bytes("4 apples")


def test_pack_puts_the_largest_shard_first_where_it_fits() -> None:
    places = [MemoryPlace("head", 10), MemoryPlace("worker", 20)]
    assert pack([6, 12], places, share=1.0) == [0, 1]
    assert pack([12, 6, 6], places, share=1.0) == [1, 0, 1]
    assert pack([11, 11], places, share=1.0) is None  # 22 bytes in all would fit 30, but no shard fits the head
    assert pack([4, 6], places, share=0.5) == [0, 1]  # with half of each place: 5 and 10
    assert pack([6, 6], places, share=0.5) is None
    assert pack([], [], share=1.0) == []


def test_a_million_atari_transitions_fit_two_8_gib_worker_pods() -> None:
    assert replay_memory_errors(experiment(), ATARI, in_cluster=True) == []


def test_too_small_pods_are_refused_with_the_numbers() -> None:
    errors = replay_memory_errors(experiment(workers="4Gi", replicas=1), ATARI, in_cluster=True)
    assert [e.path for e in errors] == ["spec.replay.capacity"]
    message = errors[0].message
    assert "1,000,000 transitions of 7," in message and "4 x 84x84 uint8 observations" in message
    assert "2 shards of 3.5" in message and "60% of each pod's memory" in message
    assert "spec.head.memory 4.00 GiB" in message and "spec.workers.memory 4.00 GiB" in message
    # the capacity it proposes fits, one more transition per shard would not
    proposed = int(message.split("capacity to at most ")[1].split(" ")[0].replace(",", ""))
    assert replay_memory_errors(experiment(capacity=proposed, workers="4Gi", replicas=1), ATARI, in_cluster=True) == []
    assert replay_memory_errors(experiment(capacity=proposed + 2, workers="4Gi", replicas=1), ATARI,
                                in_cluster=True) != []


def test_dqn_replay_lives_in_the_head_pod() -> None:
    big_workers = experiment(algorithm="dqn", capacity=500_000, shards=1, head="4Gi", workers="64Gi")
    errors = replay_memory_errors(big_workers, ATARI, in_cluster=True)
    assert errors and "spec.head.memory 4.00 GiB" in errors[0].message and "workers" not in errors[0].message
    assert replay_memory_errors(experiment(algorithm="dqn", capacity=500_000, shards=1, head="8Gi"), ATARI,
                                in_cluster=True) == []


def test_locally_the_machine_s_available_memory_counts() -> None:
    needed = sum(replay_bytes(FrameLayout.of(ATARI.observation_space, 4), 64, split_capacity(100_000, 2),
                              prioritized=True))
    spec = experiment(capacity=100_000)
    assert replay_memory_errors(spec, ATARI, in_cluster=False, available=int(needed / 0.6) + 1) == []
    errors = replay_memory_errors(spec, ATARI, in_cluster=False, available=int(needed / 0.6) - 10**6)
    assert errors and "this machine's available memory" in errors[0].message


def test_on_policy_algorithms_have_no_replay_to_check() -> None:
    assert replay_memory_errors(experiment(algorithm="ppo", shards=0), ATARI, in_cluster=False, available=1) == []
