"""The learner actor of the replay-shard topology (Ape-X, SAC with replay shards), its parts without Ray: how it
deals a shard's reply into train batches, and the learner it builds from the manifest."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from kuberl.api.validation import load_manifest
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.distributed.shard_learner import BATCHES_PER_REQUEST, ShardLearner, split_minibatches
from kuberl.trainer.replay.shard import ReplayShard
from kuberl_testing.manifests import experiment_manifest


def _transitions(n: int) -> dict[str, np.ndarray]:
    return {"obs": np.arange(n, dtype=np.float32)[:, None], "action": np.zeros(n, dtype=np.int64)}


def test_every_train_batch_of_a_shard_reply_spans_the_whole_buffer() -> None:
    """The learner asks a shard for BATCHES_PER_REQUEST train batches at once; the stratified sample comes back
    in slot order, so each of its train batches must be dealt across it, not cut from one age band of replay."""
    capacity, size = 1024, 32
    shard = ReplayShard(0, capacity, alpha=1.0, eps=0.0, seed=3)
    shard.add(_transitions(capacity), np.ones(capacity))  # equal priorities: a stratum is a run of slots
    sample, _ = shard.sample(BATCHES_PER_REQUEST * size, beta=0.4)
    minibatches = split_minibatches(sample, size, np.random.default_rng(0))
    assert len(minibatches) == BATCHES_PER_REQUEST
    band = capacity // size
    for minibatch in minibatches:
        assert np.sort(minibatch["ids"] // band).tolist() == list(range(size))  # one draw from each band
    assert sorted(np.concatenate([m["ids"] for m in minibatches]).tolist()) == sorted(sample["ids"].tolist())


def test_split_train_batches_keep_each_rows_fields_together() -> None:
    shard = ReplayShard(0, 256, alpha=0.6, seed=4)
    shard.add(_transitions(256), np.arange(256) % 7 + 0.5)  # unequal priorities: unequal importance weights
    sample, _ = shard.sample(4 * 16, beta=0.4)
    row_of = {int(i): row for row, i in enumerate(sample["ids"])}
    for minibatch in split_minibatches(sample, 16, np.random.default_rng(1)):
        rows = [row_of[int(i)] for i in minibatch["ids"]]
        for key, values in sample.items():
            np.testing.assert_array_equal(minibatch[key], values[rows])


SHARDED = {
    "apex-dqn": ("CartPole-v1", gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)),
    "sac": ("Pendulum-v1", gym.spaces.Box(-8.0, 8.0, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,), np.float32)),
}


@pytest.mark.parametrize("algorithm", sorted(SHARDED))
@pytest.mark.parametrize("bf16", [True, False])
def test_the_learner_actor_builds_its_learner_with_the_manifests_bf16(algorithm: str, bf16: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    env, observation_space, action_space = SHARDED[algorithm]
    config = AlgorithmConfig.from_experiment(load_manifest(experiment_manifest(
        "sharded", algorithm=algorithm, env=env, rollouts={"workers": 2}, replay={"shards": 1},
        learner={"bf16": bf16}, stop={"timesteps": 1000},
    )))
    monkeypatch.setattr(ShardLearner, "_publish", lambda self: None)  # ray.put: there is no Ray here
    actor = ShardLearner(config.algorithm_class().learner_builder, observation_space, action_space, config.params,
                         config.experiment.spec.learner, [])
    assert actor.learner.bf16 is bf16


def test_prioritized_replays_beta_goes_on_from_a_checkpoints_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beta anneals on the transitions added to replay; a resumed run's shards start empty, so the count the
    checkpoint holds carries it on rather than back to priorityBeta."""
    env, observation_space, action_space = SHARDED["sac"]
    config = AlgorithmConfig.from_experiment(load_manifest(experiment_manifest(
        "sharded", algorithm="sac", env=env, rollouts={"workers": 2}, replay={"shards": 1, "prioritized": True},
        config={"priorityBeta": 0.4, "priorityBetaFinal": 1.0, "priorityBetaTimesteps": 100_000},
        stop={"timesteps": 1000},
    )))
    monkeypatch.setattr(ShardLearner, "_publish", lambda self: None)  # ray.put: there is no Ray here

    def actor() -> ShardLearner:
        return ShardLearner(config.algorithm_class().learner_builder, observation_space, action_space,
                            config.params, config.experiment.spec.learner, [])

    trained = actor()
    trained.retired_adds = 50_000
    assert trained._beta() == pytest.approx(0.7)
    resumed = actor()
    assert resumed._beta() == pytest.approx(0.4)
    resumed.load_state_files(trained.state_files())
    assert resumed._beta() == pytest.approx(0.7)
    resumed.retired_adds = 10_000  # added since the resume
    assert resumed._beta() == pytest.approx(0.76)
