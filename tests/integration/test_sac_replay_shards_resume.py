"""SAC on replay shards (Ape-X's topology), on real Ray and Pendulum-v1: two rollout workers feed two
prioritized shards, the learner actor's priorities go back to them, the replay ratio stays within its
bounds, and a checkpoint resumes with the learner's update count. That it learns on this path is
`bench/sac.py --shards 2`'s (docs/benchmarks.md): too long for the CI budget."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kuberl.trainer.algorithms.sac import SACConfig, ShardedSAC
from kuberl.trainer.algorithms.sharded import shard_stats
from kuberl.trainer.distributed.shard_learner import BATCHES_PER_REQUEST
from kuberl.trainer.learners.sac import LEARNER_FILE
from kuberl.trainer.models.weights import torch_load_bytes

pytestmark = pytest.mark.slow

# What the results line's learner carries on every replay-shard algorithm (Ape-X's figures).
SHARD_LEARNER_FIELDS = {
    "updates", "replayRatio", "replayAdds", "weightSyncs", "updatesPerSecond", "queueDepthMean",
    "queueEmptyFraction", "throttledSeconds", "busyFraction", "samplesDropped", "emptyReplies", "beta",
}
MAX_REPLAY_RATIO = 32.0  # twice what replay_ratio x train_batch_size (0.25 x 64) asks for


def _config(**training) -> SACConfig:
    settings = {"hidden": [32], "learning_starts": 800, "train_batch_size": 64, "replay_ratio": 0.25,
                "max_replay_ratio": MAX_REPLAY_RATIO, "min_iteration_seconds": 0.5, **training}
    return (SACConfig().environment("Pendulum-v1").rollouts(workers=2, envs_per_worker=4, fragment_length=50)
            .replay(shards=2, capacity=20_000).training(**settings).debugging(seed=7))


def _trained_and_both_workers_act_with_published_weights(result: dict, workers: dict, timesteps: int) -> bool:
    """The learner has updated, and each worker acts with its actor (past learningStarts, no longer uniform)
    on weights the learner published after training (version 1 is the initial actor)."""
    return (result["learner"]["updates"] >= 50 and timesteps >= 2_000 and set(workers) == {"worker_1", "worker_2"}
            and all(not w["uniform"] and w["policyVersion"] > 1 for w in workers.values()))


@pytest.mark.timeout(240)
def test_two_workers_feed_two_shards_priorities_flow_back_and_a_checkpoint_resumes(tmp_path) -> None:
    import ray

    algo = _config().build()
    assert isinstance(algo, ShardedSAC)
    try:
        started = time.monotonic()
        result = algo.train()
        workers = dict(result["workers"])  # each worker's state when it last reported
        for _ in range(60):  # the second worker may start seconds after the first on a loaded machine
            if _trained_and_both_workers_act_with_published_weights(result, workers, algo.timesteps):
                break
            result = algo.train()
            workers.update(result["workers"])
        print("SAC shards:", result["iteration"], "iterations", algo.timesteps, "env steps",
              result["learner"]["updates"], "updates", round(time.monotonic() - started, 1), "s")
        assert _trained_and_both_workers_act_with_published_weights(result, workers, algo.timesteps), workers
        learner = result["learner"]
        assert set(learner) >= SHARD_LEARNER_FIELDS and learner["error"] is None
        assert learner["alpha"] > 0 and learner["criticLoss"] is not None  # SAC's own figures beside them
        shards = shard_stats(result)
        assert set(shards) == {"shard_0", "shard_1"}
        # New transitions enter at the largest priority so far (1 at first); the learner's |TD errors| coming
        # back move every shard's mean priority away from it.
        for stats in shards.values():
            assert stats["size"] > 0 and stats["samples"] > 0, stats
            assert stats["meanPriority"] != pytest.approx(1.0), stats
        # Sampled per added transition: at most MAX_REPLAY_RATIO (the learner's bound, counting the request in
        # flight); at least what replay_ratio asks of the env steps past learningStarts, less the driver's slack.
        batch = algo.params.train_batch_size
        updates, adds = learner["updates"], learner["replayAdds"]
        assert updates * batch <= MAX_REPLAY_RATIO * adds + 2 * batch * BATCHES_PER_REQUEST, learner
        in_flight = 2 * 4 * 50 * algo.params.replay_ratio  # one fragment per worker
        owed = (algo.timesteps - algo.params.learning_starts) * algo.params.replay_ratio
        assert updates >= owed - algo.slack_updates - 2 * in_flight, (updates, owed, algo.timesteps)
        sample, _ = ray.get(algo.shards[0].sample.remote(8, 0.4))
        assert sample["action"].dtype == np.float32 and sample["action"].shape == (8, 1)
        assert np.all(np.abs(sample["action"]) <= 2.0)  # Pendulum's Box
        algo.stop()  # the learner updates until stopped; a stopped algorithm keeps its final model
        uri = algo.save(tmp_path)
        saved_updates = int(torch_load_bytes(algo.learner_state()[LEARNER_FILE])["updates"])
        assert saved_updates >= updates
        obs = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
        greedy = algo.compute_actions(obs)
        timesteps = algo.timesteps
    finally:
        algo.stop()

    resumed = _config().build()
    try:
        resumed.restore(uri)
        assert resumed.timesteps == timesteps
        assert ray.get(resumed.learner.progress.remote())[0] == saved_updates
        np.testing.assert_allclose(resumed.compute_actions(obs), greedy, rtol=1e-6)
        result = resumed.train()
        assert result["timesteps"] > timesteps and result["learner"]["updates"] >= saved_updates
        # past learningStarts: the restored actor acts
        assert result["workers"] and all(w["uniform"] is False for w in result["workers"].values())
    finally:
        resumed.stop()
