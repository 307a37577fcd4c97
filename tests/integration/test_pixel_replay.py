"""DQN and Ape-X (2 rollout workers, 2 replay shards) from pixels end to end, for a few thousand env steps:
uint8 frame stacks from the env to the learner, compact replay and the bytes it reports, checkpoint and restore.

The env is one parameter (`PIXEL_ENV`): a small frame-stacked uint8 image env the tests ship; Atari's
Pong with the Atari preset takes its place where ale-py is installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from kuberl.trainer.algorithms.apex import ApexDQNConfig, shard_stats
from kuberl.trainer.algorithms.dqn import DQNConfig
from kuberl.trainer.replay.memory import FrameLayout, bytes_per_transition

pytestmark = pytest.mark.slow

# (env id, env config, observation shape): one place to point these tests at another image env
PIXEL_ENV = ("kuberl_testing.image_envs:StackedBeacon", {"size": 42, "mistakes": 30, "max_steps": 200}, (4, 42, 42))
FRAGMENT = 32
MODEL = {"conv": [[16, 8, 4], [32, 4, 2]], "hidden": [64]}  # a small conv encoder: the test is about replay


def _observations(count: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (count, *PIXEL_ENV[2]), dtype=np.uint8)


def _restored(algo, config, tmp_path):
    """Checkpoint `algo` and stop it; a fresh build restored from the checkpoint acts the same on uint8 frames."""
    try:
        uri = algo.save(tmp_path)
        obs = _observations(10)
        expected = [algo.compute_single_action(o) for o in obs]
    finally:
        algo.stop()
    fresh = config.build()
    try:
        fresh.restore(uri)
        assert [fresh.compute_single_action(o) for o in obs] == expected
    except BaseException:
        fresh.stop()
        raise
    return fresh


def _check_replay_figures(result: dict, capacity_per_shard: int, observation_space) -> None:
    layout = FrameLayout.of(observation_space, 4)
    assert layout.stack_depth == 4 and layout.dtype == np.uint8  # single uint8 frames are stored
    expected = bytes_per_transition(layout, FRAGMENT, capacity_per_shard, prioritized=True)
    assert result["replay"]["bytesPerTransition"] == pytest.approx(expected)
    obs_bytes = int(np.prod(PIXEL_ENV[2]))
    assert result["replay"]["bytesPerTransition"] < 0.4 * obs_bytes  # the plain form held obs and next_obs
    # on the wire: about one frame per transition and a few indices, never the 4 frames of a stack
    assert result["replay"]["wireBytesPerTransition"] < 1.5 * layout.frame_bytes


def test_dqn_from_pixels_end_to_end(tmp_path) -> None:
    env_id, env_config, obs_shape = PIXEL_ENV
    config = (
        DQNConfig().environment(env_id, env_config=env_config)
        .rollouts(workers=0, envs_per_worker=8, fragment_length=FRAGMENT).replay(capacity=5_000)
        .training(model=MODEL, learning_starts=512, replay_ratio=1 / 16, train_batch_size=32).debugging(seed=3)
    )
    algo = config.build()
    try:
        while algo.timesteps < 2_048:
            result = algo.train()
        assert algo.observation_space.shape == obs_shape and algo.observation_space.dtype == np.uint8
        assert result["learner"]["updates"] > 50
        _check_replay_figures(result, 5_000, algo.observation_space)
        sample = algo.local_replay.buffer.sample(16)
        assert sample["obs"].dtype == np.uint8 and sample["obs"].shape == (16, *obs_shape)  # what the learner gets
        assert sample["next_obs"].dtype == np.uint8
        assert len(algo.local_replay.buffer) == algo.timesteps  # nothing lost: the frame ring holds every transition
    except BaseException:
        algo.stop()
        raise
    fresh = _restored(algo, config, tmp_path)
    try:
        assert fresh.learner.updates == result["learner"]["updates"]
    finally:
        fresh.stop()


def test_apex_from_pixels_with_two_workers_and_two_shards(tmp_path) -> None:
    import ray

    env_id, env_config, obs_shape = PIXEL_ENV
    config = (
        ApexDQNConfig().environment(env_id, env_config=env_config)
        .rollouts(workers=2, envs_per_worker=4, fragment_length=FRAGMENT).replay(shards=2, capacity=8_000)
        .training(model=MODEL, learning_starts=1_000, train_batch_size=32, min_iteration_seconds=1.0)
        .debugging(seed=4)
    )
    algo = config.build()
    try:
        result = algo.train()
        reported = set(result["workers"])  # an iteration reports only the workers that returned in it
        while algo.timesteps < 3_000 or result["learner"]["updates"] == 0 or len(reported) < 2:
            result = algo.train()
            reported.update(result["workers"])
        assert set(shard_stats(result)) == {"shard_0", "shard_1"}
        assert all(stats["size"] > 0 for stats in shard_stats(result).values())
        assert reported == {"worker_1", "worker_2"}
        _check_replay_figures(result, 4_000, algo.observation_space)
        batch, _ = ray.get(algo.shards[0].sample.remote(8, 0.4))  # what the learner receives from a shard
        assert batch["obs"].dtype == np.uint8 and batch["obs"].shape == (8, *obs_shape)
        assert batch["next_obs"].dtype == np.uint8
        updates = ray.get(algo.learner.progress.remote())[0]
        algo.stop()  # the learner updates until stopped; a stopped algorithm keeps its final model
    except BaseException:
        algo.stop()
        raise
    fresh = _restored(algo, config, tmp_path)
    try:
        assert ray.get(fresh.learner.progress.remote())[0] >= updates > 0
        assert fresh.timesteps == result["timesteps"]
    finally:
        fresh.stop()
