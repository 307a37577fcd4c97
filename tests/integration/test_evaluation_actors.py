"""Evaluation on a Ray evaluation actor (workers: 1), in parallel with training."""

from __future__ import annotations

import io
import json

import pytest

from kuberl.api.algorithms import REGISTRY
from kuberl.api.validation import load_manifest
from kuberl.trainer.run.driver import TrainOptions, run_training
from kuberl_testing.manifests import experiment_manifest


def manifest(name: str, iterations: int, evaluation: dict, checkpoint: dict | None = None,
             algorithm: str = "ppo", env: str = "CartPole-v1") -> str:
    workers = 1 if algorithm == "apex-dqn" else 0  # apex-dqn samples only on rollout worker actors
    return experiment_manifest(name, algorithm=algorithm, env=env, seed=7,
                               rollouts={"workers": workers, "envsPerWorker": 2, "fragmentLength": 32},
                               traces={"enabled": False}, stop={"iterations": iterations},
                               checkpoint=checkpoint or {}, evaluation=evaluation)


MANIFEST = manifest("evaluated-on-actors", 9, {"interval": 4, "episodes": 3, "workers": 1})


def test_an_evaluation_actor_evaluates_every_interval_and_the_end(tmp_path):
    summary = run_training(load_manifest(MANIFEST),
                           TrainOptions(storage_uri=f"file://{tmp_path}", quiet=True, out=io.StringIO()))
    assert summary.result == "Succeeded"
    lines = [json.loads(line) for line in (tmp_path / "evaluated-on-actors" / "results.jsonl").read_text().splitlines()]
    # One line per iteration; an evaluation still running at the end may add one line after them.
    assert [line["iteration"] for line in lines[:9]] == list(range(1, 10))
    assert all(line["iteration"] == 9 for line in lines[9:]) and len(lines) <= 10
    evaluations = [line["evaluation"] for line in lines if "evaluation" in line]
    assert [e["iteration"] for e in evaluations] == [4, 8, 9]  # each once, in order, at its policy's iteration
    for line in lines:
        if "evaluation" in line:  # reported on the line of the iteration in which it finished, never earlier
            assert line["iteration"] >= line["evaluation"]["iteration"]
    by_iteration = {line["iteration"]: line for line in lines[:9]}
    for evaluation in evaluations:
        assert evaluation["episodes"] == 3 and len(evaluation["returns"]) == 3
        assert evaluation["timesteps"] == by_iteration[evaluation["iteration"]]["timesteps"]
    assert summary.evaluationReturnMean == evaluations[-1]["returnMean"]


S3_MANIFEST = manifest("filmed", 2, {"interval": 1, "episodes": 2, "workers": 1, "video": {"everyEvaluations": 1}},
                       checkpoint={"everyIterations": 1, "keep": 1, "keepBest": True})


def test_videos_and_the_best_pointer_reach_s3_and_kuberl_traces_lists_the_videos(s3, s3_bucket, tmp_path):
    imageio = pytest.importorskip("imageio")  # the video extra
    from kuberl.trainer.run.traces_report import report
    from kuberl.trainer.storage.checkpoints import read_best_pointer
    from kuberl.trainer.storage.s3 import S3Store

    summary = run_training(load_manifest(S3_MANIFEST),
                           TrainOptions(storage_uri=f"s3://{s3_bucket}/runs", quiet=True, out=io.StringIO()))
    assert summary.result == "Succeeded"
    store = S3Store(f"s3://{s3_bucket}/runs/filmed", endpoint=s3.endpoint)
    keys = sorted(k for k in store.list("videos/"))
    assert keys == ["videos/evaluation-000001.mp4", "videos/evaluation-000002.mp4"]
    lines = [json.loads(line) for line in store.get_bytes("results.jsonl").decode().splitlines()]
    evaluations = {line["evaluation"]["iteration"]: line["evaluation"] for line in lines if "evaluation" in line}
    assert sorted(evaluations) == [1, 2]
    assert evaluations[2]["video"] == store.url("videos/evaluation-000002.mp4")
    local = tmp_path / "evaluation-000002.mp4"
    local.write_bytes(store.get_bytes("videos/evaluation-000002.mp4"))
    reader = imageio.get_reader(local)
    assert sum(1 for _ in reader.iter_data()) == int(evaluations[2]["returns"][0]) + 1
    reader.close()
    best = max(evaluations.values(), key=lambda e: e["returnMean"])
    assert read_best_pointer(store)["iteration"] == best["iteration"]
    text = report(f"s3://{s3_bucket}/runs/filmed", endpoint=s3.endpoint, png_path=tmp_path / "curve.png")
    assert "videos: 2" in text and store.url("videos/evaluation-000001.mp4") in text
    assert "evaluations: 2" in text


@pytest.mark.parametrize("algorithm", sorted(a for a in REGISTRY if a != "ppo"))
def test_every_algorithm_is_evaluated_on_an_actor(tmp_path, algorithm):
    env = "CartPole-v1" if "Discrete" in REGISTRY[algorithm].action_spaces else "Pendulum-v1"
    text = manifest(f"every-{algorithm}", 3, {"interval": 2, "episodes": 2, "workers": 1}, algorithm=algorithm, env=env)
    summary = run_training(load_manifest(text), TrainOptions(storage_uri=f"file://{tmp_path}", quiet=True,
                                                             out=io.StringIO()))
    assert summary.result == "Succeeded"
    lines = [json.loads(line) for line in (tmp_path / f"every-{algorithm}" / "results.jsonl").read_text().splitlines()]
    evaluations = [line["evaluation"] for line in lines if "evaluation" in line]
    assert [e["iteration"] for e in evaluations] == [2, 3]
    assert all(e["episodes"] == 2 and e["returnMean"] is not None for e in evaluations)


def test_a_lost_evaluation_actor_costs_one_evaluation_and_is_replaced(caplog):
    import ray

    from kuberl.trainer.algorithms.ppo import PPOConfig
    from kuberl.trainer.evaluation.evaluator import Evaluator

    config = (PPOConfig().environment("CartPole-v1").rollouts(envs_per_worker=2, fragment_length=32)
              .debugging(seed=3).evaluation(interval=1, episodes=4, workers=1))
    algo = config.build()
    evaluator = Evaluator(config.experiment.spec.evaluation, algo)
    try:
        algo.train()
        (actor,) = evaluator._ensure_actors(algo.evaluation_policy()[0])
        ray.kill(actor, no_restart=True)  # lost before it could answer, whatever the timing
        evaluator.launch(1, algo.timesteps)
        assert evaluator.drain() == []  # that evaluation is lost, with a warning
        assert "evaluation of iteration 1 failed" in caplog.text
        algo.train()
        evaluator.launch(2, algo.timesteps)
        (finished,) = evaluator.drain()
        assert finished.iteration == 2 and finished.summary.episodes == 4
        assert evaluator._actors and evaluator._actors[0] is not actor  # a fresh actor played it
    finally:
        evaluator.stop()
        algo.stop()


def test_an_actor_plays_exactly_as_the_learner_with_its_weights_and_filter():
    from kuberl.trainer.algorithms.ppo import PPOConfig
    from kuberl.trainer.evaluation.evaluator import Evaluator

    config = (PPOConfig().environment("CartPole-v1").rollouts(envs_per_worker=2, fragment_length=64)
              .training(observation_filter="mean_std").debugging(seed=9)
              .evaluation(interval=1, episodes=3, workers=1))
    algo = config.build()
    spec = config.experiment.spec.evaluation
    on_actor = Evaluator(spec, algo)
    in_process = Evaluator(spec.model_copy(update={"workers": 0}), algo)
    try:
        for _ in range(3):
            algo.train()
        assert algo.obs_filter.get_state() is not None  # a filter that changes what the policy sees
        on_actor.launch(3, algo.timesteps)
        in_process.launch(3, algo.timesteps)
        (remote,), (local,) = on_actor.drain(), in_process.drain()
        assert remote.summary.returns == local.summary.returns  # same policy, filter and seeds
    finally:
        on_actor.stop()
        algo.stop()
