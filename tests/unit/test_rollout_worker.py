"""RolloutWorker: batch layout, episode ends in both autoreset modes, records, filters, seeds."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from kuberl.trainer.models.actor_critic import Actor
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.weights import state_dict_to_numpy
from kuberl.trainer.sampling.policies import PPOPolicyFactory
from kuberl.trainer.sampling.rollout_worker import RolloutWorker, WorkerConfig
from kuberl.trainer.sampling.worker_set import WorkerSet
from kuberl_testing.rollouts import assert_same_samples
from kuberl_testing.user_modules import importable_module

CORRIDOR = '''
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    def __init__(self, length=3):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 100.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.position += 1
        return np.array([self.position], dtype=np.float32), 1.0, self.position >= self.length, False, {}
'''


class RandomPolicy:
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int):
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)
        self.weights = None

    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        actions = self.rng.integers(0, self.action_space.n, size=len(obs))
        return actions, {"marker": np.full(len(obs), 7.0, dtype=np.float32)}

    def set_weights(self, weights) -> None:
        self.weights = weights


@pytest.fixture
def corridor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for module in importable_module(tmp_path, monkeypatch, "corridor_rollout_env", CORRIDOR):
        yield f"{module}:Corridor"


def test_native_vector_env_batch_marks_reset_steps_invalid() -> None:
    worker = RolloutWorker(WorkerConfig("CartPole-v1", num_envs=4, fragment_length=100, seed=3), RandomPolicy)
    batch = worker.sample()
    d = batch.data
    assert d["obs"].shape == (100, 4, 4) and d["actions"].shape == (100, 4) and d["marker"].shape == (100, 4)
    done = d["terminateds"] | d["truncateds"]
    assert done.any()
    # The step after an episode's end only resets that env in Gymnasium's native vector env.
    for t, i in zip(*np.nonzero(done[:-1]), strict=True):
        assert not d["valid"][t + 1, i]
    assert batch.env_steps == int(d["valid"].sum()) == 400 - int(done[:-1].sum())
    assert 0 < batch.env_seconds < batch.sample_seconds  # the envs' share of the time, the policy's the rest
    # Inside an episode, next_obs is the next row's obs.
    keep = d["valid"][:-1] & ~done[:-1]
    np.testing.assert_array_equal(d["next_obs"][:-1][keep], d["obs"][1:][keep])
    # Each finished episode's record agrees with the batch's rewards.
    assert len(batch.episodes) == int(done.sum())
    for record in batch.episodes:
        assert {"experiment", "worker", "episode", "env", "return", "length", "policyVersion", "startTime",
                "endTime"} <= set(record)
        assert record["return"] == record["length"]  # CartPole pays 1 a step
        assert record["endTime"] >= record["startTime"]


def test_sync_fallback_keeps_the_final_observation_of_each_episode(corridor: str) -> None:
    config = WorkerConfig(corridor, {"length": 3}, num_envs=2, fragment_length=7, record_steps=True, experiment="e")
    worker = RolloutWorker(config, RandomPolicy)
    batch = worker.sample()
    d = batch.data
    assert d["valid"].all()  # same-step autoreset: every row is a real transition
    assert d["terminateds"][:, 0].tolist() == [False, False, True, False, False, True, False]
    assert d["next_obs"][2, 0, 0] == 3.0  # the terminal observation, not the reset one
    assert d["obs"][3, 0, 0] == 0.0  # the next row starts the new episode
    assert [r["length"] for r in batch.episodes] == [3, 3, 3, 3]
    assert [len(r["steps"]) for r in batch.episodes] == [3, 3, 3, 3]
    assert batch.episodes[0]["steps"][1]["obs"] == [1.0]
    assert batch.episodes[0]["experiment"] == "e"


def test_same_seed_gives_the_same_batch() -> None:
    config = WorkerConfig("CartPole-v1", num_envs=3, fragment_length=20, seed=5)
    a, b = RolloutWorker(config, RandomPolicy).sample(), RolloutWorker(config, RandomPolicy).sample()
    np.testing.assert_array_equal(a.data["obs"], b.data["obs"])
    np.testing.assert_array_equal(a.data["actions"], b.data["actions"])


def test_each_worker_gets_its_own_policy_seed_and_a_set_seed_repeats_them() -> None:
    seen: list[int] = []

    def factory(observation_space: gym.Space, action_space: gym.Space, seed: int) -> RandomPolicy:
        seen.append(seed)
        return RandomPolicy(observation_space, action_space, seed)

    for seed in (None, None, 5, 5):
        for index in (1, 2):
            RolloutWorker(WorkerConfig("CartPole-v1", num_envs=1, fragment_length=1, seed=seed), factory, index).stop()
    unseeded, seeded = seen[:4], seen[4:]
    assert len(set(unseeded)) == 4  # unseeded runs draw independent seeds, even for the same worker index
    assert seeded[:2] == seeded[2:] and seeded[0] != seeded[1]


@pytest.mark.parametrize("seed", [None, 5])
def test_workers_with_the_same_weights_explore_with_different_noise(seed: int | None) -> None:
    """Ape-X's per-worker epsilons and every on-policy sampler rely on workers' noise being independent."""
    config = WorkerConfig("CartPole-v1", num_envs=4, fragment_length=50, seed=seed)
    encoder = EncoderSpec((16,), "tanh")
    workers = [RolloutWorker(config, PPOPolicyFactory(encoder), index) for index in (1, 2)]
    weights = state_dict_to_numpy(Actor(workers[0].env.single_observation_space, workers[0].action_space,
                                        encoder.hidden, encoder.activation, encoder))
    actions = []
    for worker in workers:
        worker.set_weights(weights, 1)
        actions.append(worker.sample().data["actions"])
        worker.stop()
    # A nearly uniform policy: independent draws agree about half the time, shared noise always.
    assert (actions[0] == actions[1]).mean() < 0.8


def test_mean_std_filter_normalises_and_reports_its_delta() -> None:
    config = WorkerConfig("CartPole-v1", num_envs=4, fragment_length=50, observation_filter="mean_std", seed=1)
    worker = RolloutWorker(config, RandomPolicy)
    batch = worker.sample()
    assert batch.filter_delta is not None and batch.filter_delta.count == 4 + 200  # the reset obs, then 50 steps
    assert np.abs(batch.data["obs"]).max() <= 10.0
    assert worker.sample().filter_delta.count == 200  # counted since the last batch only


def test_in_process_worker_set_passes_weights_and_versions() -> None:
    workers = WorkerSet(WorkerConfig("CartPole-v1", num_envs=2, fragment_length=5), RandomPolicy, num_workers=0)
    try:
        workers.publish_weights({"w": 1}, policy_version=4)
        [batch] = workers.sample()
        assert batch.policy_version == 4 and batch.worker == 0
        assert workers.local_worker.policy.weights == {"w": 1}
    finally:
        workers.stop()


@pytest.mark.parametrize("groups", [2, 4])
def test_env_groups_sample_what_one_group_does(corridor: str, groups: int) -> None:
    """rollouts.envGroups changes the order the envs step in, not the transitions: here Gymnasium's same-step
    autoreset, whose final observations come through the info (ALE's overlapped groups: test_atari_vector.py)."""
    assert_same_samples(WorkerConfig(corridor, num_envs=4, fragment_length=7, seed=2, record_steps=True), groups)
