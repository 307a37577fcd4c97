"""Rollout workers as real Ray actors: parallel batches, weight broadcast, a killed actor is replaced."""

import numpy as np
import pytest

from kuberl.trainer.algorithms.ppo import PPOConfig

pytestmark = pytest.mark.slow


def test_two_actors_sample_in_parallel_and_survive_a_kill(ray_session) -> None:
    ray = ray_session
    algo = (
        PPOConfig().environment("CartPole-v1").rollouts(workers=2, envs_per_worker=4, fragment_length=32)
        .training(minibatch_size=64).debugging(seed=4).build()
    )
    try:
        first = algo.train()
        assert first["sampler"]["batches"] == 2
        assert 2 * 4 * 32 - first["episodes"] <= first["timesteps"] <= 2 * 4 * 32
        workers_seen = {ray.get(actor.ping.remote()) for actor in algo.sampler.actors}
        assert workers_seen == {1, 2}

        ray.kill(algo.sampler.actors[0], no_restart=True)
        second = algo.train()  # goes on with the surviving worker while the dead one is replaced
        assert second["iteration"] == 2 and second["timesteps"] > first["timesteps"]
        assert second["sampler"]["workerRestarts"] == 1

        third = algo.train()  # the replacement samples with the current weights
        assert third["sampler"]["batches"] == 2
        assert third["sampler"]["workerRestarts"] == 1
        replacement = algo.sampler.actors[0]
        assert ray.get(replacement.ping.remote()) == 1
        version = ray.get(replacement.__ray_call__.remote(lambda worker: worker.policy_version))
        assert version == algo.policy_version
    finally:
        algo.stop()


def test_workers_send_filter_statistics_to_the_learner(ray_session) -> None:
    algo = (
        PPOConfig().environment("CartPole-v1").rollouts(workers=2, envs_per_worker=2, fragment_length=16)
        .training(minibatch_size=32, observation_filter="mean_std").debugging(seed=5).build()
    )
    try:
        algo.train()
        stats = algo.obs_filter.get_state()
        # Both workers' observations reached the master: 2 workers x (2 reset obs + 2 envs x 16 steps).
        assert stats.count == 2 * (2 + 2 * 16)
        assert np.all(stats.std > 0)
    finally:
        algo.stop()
