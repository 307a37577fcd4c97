"""Reward normalization (`normalizeRewards`): the discounted returns, their running std, the scale and the clip."""

from pathlib import Path

import numpy as np
import pytest

from kuberl.trainer.learning.reward_scale import RewardScale, discounted_returns
from kuberl.trainer.sampling.rollout_worker import SampleBatch


def fragment(rewards: np.ndarray, dones: np.ndarray | None = None, valid: np.ndarray | None = None,
             worker: int = 0) -> SampleBatch:
    shape = rewards.shape
    data = {"rewards": rewards.astype(np.float32),
            "terminateds": np.zeros(shape, dtype=bool) if dones is None else dones,
            "truncateds": np.zeros(shape, dtype=bool),
            "valid": np.ones(shape, dtype=bool) if valid is None else valid}
    return SampleBatch(data, [], int(data["valid"].sum()), worker, 0)


def test_discounted_returns_accumulate_restart_after_an_end_and_skip_reset_rows():
    rewards = np.array([[1.0], [1.0], [1.0], [5.0], [1.0]])
    dones = np.array([[False], [True], [False], [False], [False]])
    valid = np.array([[True], [True], [False], [True], [True]])  # row 2: the env's reset step, no transition
    returns, running = discounted_returns(rewards, dones, valid, 0.5, np.array([2.0]))
    # 0.5 * 2 + 1 = 2; 0.5 * 2 + 1 = 2, the episode ends; row 2 keeps 0; then 5; then 0.5 * 5 + 1
    np.testing.assert_allclose(returns[:, 0], [2.0, 2.0, 0.0, 5.0, 3.5])
    np.testing.assert_allclose(running, [3.5])


def test_the_running_return_carries_from_one_fragment_of_a_worker_to_its_next():
    scale = RewardScale(gamma=0.9)
    ones = np.ones((4, 2))
    scale.scale(fragment(ones, worker=0))
    whole, _ = discounted_returns(np.ones((8, 2)), np.zeros((8, 2), bool), np.ones((8, 2), bool), 0.9, np.zeros(2))

    def running(worker: int) -> list[float]:  # a batch without column_keys: its columns are the worker's envs
        return [scale.running[(worker, column)] for column in range(2)]

    np.testing.assert_allclose(running(0), whole[3])
    scale.scale(fragment(ones, worker=1))  # another worker's envs start their own returns
    np.testing.assert_allclose(running(1), whole[3])
    scale.scale(fragment(ones, worker=0))
    np.testing.assert_allclose(running(0), whole[7])


def test_rewards_are_divided_by_the_std_of_the_returns_and_clipped():
    rng = np.random.default_rng(0)
    scale = RewardScale(gamma=0.99)
    rewards = rng.normal(3.0, 1.0, size=(256, 8))
    dones = rng.random((256, 8)) < 0.01
    scaled = scale.scale(fragment(rewards, dones))
    returns, _ = discounted_returns(rewards, dones, np.ones_like(dones), 0.99, np.zeros(8))
    np.testing.assert_allclose(scaled, rewards / returns.std(), rtol=1e-4)
    assert scaled.dtype == np.float32
    assert scale.stats.count == rewards.size
    # A reward far past the returns' spread is clipped to +-10 (CleanRL's clip after its NormalizeReward).
    spike = np.zeros((4, 8))
    spike[2, 3] = 1e6
    assert scale.scale(fragment(spike)).max() == pytest.approx(10.0)


def test_the_scale_is_one_before_there_are_two_returns():
    scale = RewardScale(gamma=0.99)
    assert scale.scale(fragment(np.array([[0.5]])))[0, 0] == pytest.approx(0.5, rel=1e-6)


def test_the_learners_advantages_do_not_change_with_the_rewards_units():
    """With normalizeRewards, rewards 1,000 times larger give the same advantages; without it, 1,000 times larger."""
    import gymnasium as gym
    import torch

    from kuberl.api.hyperparams import PPOParams
    from kuberl.trainer.learners.ppo import PPOLearner
    from kuberl.trainer.models.actor_critic import ActorCritic

    def advantages(normalize_rewards: bool, scale_by: float) -> np.ndarray:
        torch.manual_seed(0)
        model = ActorCritic(gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2), [8], "tanh")
        params = PPOParams(normalize_rewards=normalize_rewards)
        learner = PPOLearner(model, params, torch.device("cpu"), np.random.default_rng(0))
        rng = np.random.default_rng(1)
        obs = rng.normal(size=(65, 4, 3)).astype(np.float32)
        data = {"obs": obs[:-1], "next_obs": obs[1:], "actions": np.zeros((64, 4), dtype=np.int64),
                "rewards": (rng.normal(1.0, 1.0, size=(64, 4)) * scale_by).astype(np.float32),
                "terminateds": rng.random((64, 4)) < 0.05, "truncateds": np.zeros((64, 4), dtype=bool),
                "valid": np.ones((64, 4), dtype=bool), "logp": np.zeros((64, 4), dtype=np.float32)}
        return learner.learner_batch([SampleBatch(data, [], 256, 0, 0)])["advantages"].numpy()

    np.testing.assert_allclose(advantages(True, 1000.0), advantages(True, 1.0), rtol=1e-3, atol=1e-4)
    raw, raw_large = advantages(False, 1.0), advantages(False, 1000.0)
    assert np.abs(raw_large).mean() > 500 * np.abs(raw).mean()
    assert np.abs(advantages(True, 1.0)).mean() < 0.5 * np.abs(raw).mean()  # the returns' std is above 1 here


def test_the_statistics_are_in_the_checkpoint_and_come_back(tmp_path: Path):
    from kuberl.trainer.algorithms.ppo import PPOConfig

    def build(seed: int):
        return (PPOConfig().environment("Pendulum-v1").rollouts(workers=0, envs_per_worker=2, fragment_length=100)
                .training(normalize_rewards=True, minibatch_size=100).debugging(seed=seed).build())

    algo = build(1)
    try:
        algo.train()
        result = algo.train()
        stats = algo.learner.reward_scale.stats.copy()
        uri = algo.save(str(tmp_path / "run"))
    finally:
        algo.stop()
    assert stats.count == 400 and stats.std > 0
    assert result["episodeReturnMean"] < -100  # Pendulum's episode returns are reported raw, not scaled
    fresh = build(2)
    try:
        assert fresh.learner.reward_scale.stats.count == 0
        fresh.restore(uri)
        restored = fresh.learner.reward_scale.stats
        assert (restored.count, float(restored.mean), float(restored.m2)) == (stats.count, float(stats.mean),
                                                                                 float(stats.m2))
    finally:
        fresh.stop()


def _returns_so_far(steps: int, gamma: float) -> list[float]:
    """An episode of rewards 1: its discounted return after each step."""
    return [sum(gamma ** i for i in range(k)) for k in range(1, steps + 1)]


def test_a_replaced_workers_envs_start_their_own_returns():
    """A rollout worker that replaces a dead one takes its index, not its envs: its episodes start at 0, as
    those of a worker never seen before do (CartPole, real envs, mid-episode at the fragment's end)."""
    from dataclasses import replace

    from kuberl.trainer.sampling.rollout_worker import RolloutWorker, WorkerConfig

    class Left:
        def __init__(self, *args: object) -> None: ...

        def compute_actions(self, obs: np.ndarray, explore: bool = True):
            return np.zeros(len(obs), dtype=np.int64), {}

        def set_weights(self, weights: object) -> None: ...

    config = WorkerConfig("CartPole-v1", num_envs=2, fragment_length=4, seed=0)
    dead, replacement = RolloutWorker(config, Left, 1), RolloutWorker(replace(config, seed=1), Left, 1)
    try:
        first, second = dead.sample(), replacement.sample()
    finally:
        dead.stop()
        replacement.stop()
    assert not (first.data["terminateds"] | first.data["truncateds"]).any()  # the dead one's episodes go on
    inherited, fresh = RewardScale(gamma=0.9), RewardScale(gamma=0.9)
    inherited.scale(first)
    inherited.scale(second)
    fresh.scale(first)
    fresh.scale(replace(second, worker=2))  # a worker never seen before
    assert inherited.stats.count == fresh.stats.count == 16
    assert float(inherited.stats.mean) == pytest.approx(float(fresh.stats.mean))
    assert float(fresh.stats.mean) == pytest.approx(np.mean(_returns_so_far(4, 0.9)))


def test_multi_agent_running_returns_follow_their_agent_when_columns_are_reassigned():
    """RelayEnv in fragments of 4: in the first runner_0, runner_1 and late_0 fill columns 0, 1 and 2; in the second
    runner_1 and late_0 (runner_0 has left) fill columns 0 and 1. Each agent's return goes on from its own."""
    from kuberl_testing.multi_agent_workers import relay_worker

    worker = relay_worker(None, fragment=4)
    scale = RewardScale(gamma=0.9)
    batches = [worker.sample().policy_batches["shared"] for _ in range(2)]
    assert [b.data["valid"].shape[1] for b in batches] == [3, 2]
    for batch in batches:
        scale.scale(batch)
    # Every reward is 1 (the parity policy): runner_0 plays 3 steps, runner_1 8, late_0 6, each one episode.
    expected = [*_returns_so_far(3, 0.9), *_returns_so_far(8, 0.9), *_returns_so_far(6, 0.9)]
    assert scale.stats.count == len(expected)
    assert float(scale.stats.mean) == pytest.approx(np.mean(expected))
    assert float(scale.stats.std) == pytest.approx(np.std(expected), rel=1e-6)
