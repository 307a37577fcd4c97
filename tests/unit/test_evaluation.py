"""Evaluation during training in the learner's process (workers: 0): which iterations, how many
episodes, the stop criterion on it, checkpoints/best, and a video that decodes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from kuberl.api.field_errors import ManifestError
from kuberl.api.validation import load_manifest
from kuberl.trainer.run.driver import TrainOptions, run_training
from kuberl.trainer.run.metrics import TrainerMetrics, metrics_registry
from kuberl.trainer.storage.checkpoints import list_checkpoints, read_best_pointer
from kuberl.trainer.storage.local import LocalStore

MANIFEST = """\
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {{name: evaluated}}
spec:
  algorithm: ppo
  env: {{id: CartPole-v1}}
  config: {{seed: 5}}
  rollouts: {{workers: 0, envsPerWorker: 2, fragmentLength: 32}}
  traces: {{enabled: false}}
  stop: {stop}
  checkpoint: {checkpoint}
  evaluation: {evaluation}
"""


def train(tmp_path: Path, *, stop: str, evaluation: str, checkpoint: str = "{everyIterations: 10, keep: 2}",
          metrics: TrainerMetrics | None = None):
    experiment = load_manifest(MANIFEST.format(stop=stop, evaluation=evaluation, checkpoint=checkpoint))
    summary = run_training(experiment, TrainOptions(storage_uri=f"file://{tmp_path}", quiet=True, out=io.StringIO()),
                           metrics=metrics)
    run = tmp_path / "evaluated"
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    return summary, run, lines


def test_evaluations_at_every_interval_and_at_the_end_with_their_episode_counts(tmp_path):
    metrics = TrainerMetrics()
    summary, _run, lines = train(tmp_path, stop="{iterations: 7}", evaluation="{interval: 3, episodes: 4}",
                                 metrics=metrics)
    assert summary.result == "Succeeded"
    assert [line["iteration"] for line in lines] == list(range(1, 8))  # one line per iteration, no extras
    evaluated = {line["iteration"]: line["evaluation"] for line in lines if "evaluation" in line}
    assert sorted(evaluated) == [3, 6, 7]
    for iteration, evaluation in evaluated.items():
        assert evaluation["iteration"] == iteration  # in process: on the line of the policy it played
        assert evaluation["episodes"] == 4 and len(evaluation["returns"]) == 4
        assert evaluation["returnMean"] == pytest.approx(sum(evaluation["returns"]) / 4)
        assert evaluation["lengthMean"] == pytest.approx(evaluation["returnMean"])  # CartPole: 1 per step
        # the population std of the returns it lists, positive where they differ (CartPole's seeded episodes do)
        assert evaluation["returnStd"] == pytest.approx(float(np.std(evaluation["returns"])))
        assert (evaluation["returnStd"] > 0) == (len(set(evaluation["returns"])) > 1)
    assert any(len(set(e["returns"])) > 1 for e in evaluated.values()), evaluated  # a spread was measured at all
    assert summary.evaluationReturnMean == evaluated[7]["returnMean"]
    registry = metrics_registry(metrics)
    assert registry.get_sample_value("kuberl_evaluation_return_mean") == evaluated[7]["returnMean"]
    assert registry.get_sample_value("kuberl_evaluation_iteration") == 7
    assert registry.get_sample_value("kuberl_evaluations_total") == 3


def test_the_stop_criterion_on_the_evaluation_return(tmp_path):
    summary, _run, lines = train(tmp_path, stop="{iterations: 50, evaluationReturnMean: 1}",
                                 evaluation="{interval: 2, episodes: 2}")
    assert summary.result == "Succeeded" and summary.message.startswith("evaluationReturnMean")
    assert lines[-1]["iteration"] == 2 and lines[-1]["evaluation"]["returnMean"] >= 1
    assert len(lines) == 2


def test_keep_best_points_at_the_best_evaluation_and_retention_keeps_it(tmp_path):
    summary, run, lines = train(tmp_path, stop="{iterations: 6}", evaluation="{interval: 1, episodes: 2}",
                                checkpoint="{everyIterations: 1, keep: 1, keepBest: true}")
    store = LocalStore(run)
    evaluations = [line["evaluation"] for line in lines]
    best_iteration = max(evaluations, key=lambda e: e["returnMean"])["iteration"]  # the first of equals
    pointer = read_best_pointer(store)
    assert pointer is not None and pointer["iteration"] == best_iteration
    assert pointer["evaluationReturnMean"] == max(e["returnMean"] for e in evaluations)
    kept = {c.iteration for c in list_checkpoints(store)}
    assert kept == {best_iteration, 6}  # keep: 1 holds the newest; best stays beside it
    assert summary.lastCheckpoint.endswith("/checkpoints/000006")


def test_a_video_of_one_evaluation_episode_decodes_to_one_frame_per_step_plus_the_reset(tmp_path):
    imageio = pytest.importorskip("imageio")  # the video extra
    _summary, run, lines = train(tmp_path, stop="{iterations: 3}",
                                 evaluation="{interval: 1, episodes: 2, video: {everyEvaluations: 2}}")
    with_video = [line["evaluation"] for line in lines if "video" in line["evaluation"]]
    assert [e["iteration"] for e in with_video] == [1, 3]  # the first evaluation, then every second
    assert sorted(p.name for p in (run / "videos").iterdir()) == ["evaluation-000001.mp4", "evaluation-000003.mp4"]
    for evaluation in with_video:
        path = run / "videos" / f"evaluation-{evaluation['iteration']:06d}.mp4"
        assert evaluation["video"] == path.as_uri()
        reader = imageio.get_reader(path)
        frames = sum(1 for _ in reader.iter_data())
        reader.close()
        episode_length = int(evaluation["returns"][0])  # CartPole: the return is the length
        assert frames == episode_length + 1  # RecordVideo: a frame after reset and after every step


def test_evaluation_fields_need_spec_evaluation():
    text = MANIFEST.replace("  evaluation: {evaluation}\n", "").format(
        stop="{iterations: 2, evaluationReturnMean: 5}", checkpoint="{keepBest: true}", evaluation="")
    with pytest.raises(ManifestError) as caught:
        load_manifest(text)
    paths = {e.path for e in caught.value.errors}
    assert paths == {"spec.stop.evaluationReturnMean", "spec.checkpoint.keepBest"}


def test_a_resumed_run_replaces_the_best_only_with_a_better_evaluation(tmp_path):
    checkpoint = "{everyIterations: 1, keep: 1, keepBest: true}"
    train(tmp_path, stop="{iterations: 2}", evaluation="{interval: 1, episodes: 1}", checkpoint=checkpoint)
    store = LocalStore(tmp_path / "evaluated")
    planted = {**read_best_pointer(store), "evaluationReturnMean": 1e9}  # no evaluation can beat it
    store.put_bytes("checkpoints/best", json.dumps(planted).encode())
    _summary, _run, lines = train(tmp_path, stop="{iterations: 4}", evaluation="{interval: 1, episodes: 1}",
                                  checkpoint=checkpoint)
    assert [line["evaluation"]["iteration"] for line in lines] == [1, 2, 3, 4]  # it resumed and evaluated
    assert read_best_pointer(store) == planted
    assert planted["iteration"] in {c.iteration for c in list_checkpoints(store)}


def test_evaluation_actors_explore_with_the_workers_epsilon_not_at_random():
    """evaluation.explore: true on an evaluation actor (what runs on Ray when evaluation.workers >= 1): DQN's
    epsilon-greedy policy acts with the run's current epsilon. Unconfigured, it kept its starting 1.0 and
    played uniformly at random."""
    import numpy as np

    from kuberl.trainer.algorithms.dqn import DQNConfig
    from kuberl.trainer.evaluation.actor import EvaluationWorker
    from kuberl.trainer.sampling.policy_settings import PolicySettings

    algo = (DQNConfig().environment("CartPole-v1").rollouts(workers=0, envs_per_worker=4, fragment_length=32)
            .training(learning_starts=64, epsilon_timesteps=256, epsilon_end=0.0, train_batch_size=32)
            .debugging(seed=3).build())
    try:
        while algo.timesteps < 512:
            algo.train()
        factory, weights = algo.evaluation_policy()
        settings = algo.evaluation_settings()
        assert settings == PolicySettings(epsilon=0.0)
        obs = np.random.default_rng(0).normal(0.0, 0.5, (400, 4)).astype(np.float32)
        greedy = algo.compute_actions(obs, explore=False)
    finally:
        algo.stop()
    worker = EvaluationWorker(algo.evaluation_env(), factory, "none", seed=1)
    played = worker.evaluate(weights, None, [11], explore=True, record_first=False, settings=settings)
    assert played.lengths[0] > 0
    actions, _ = worker.policy.compute_actions(obs, explore=True)
    assert (actions == greedy).all()  # epsilon 0: the greedy actions, every one
    unconfigured = EvaluationWorker(algo.evaluation_env(), factory, "none", seed=1)
    unconfigured.policy.set_weights(weights)
    random_actions, _ = unconfigured.policy.compute_actions(obs, explore=True)
    assert (random_actions == greedy).mean() < 0.8  # what the defect did: epsilon 1.0, a coin flip per step
