"""Evaluation on a Ray evaluation actor (workers: 1), in parallel with training."""

from __future__ import annotations

import io
import json

from kuberl.api.validation import load_manifest
from kuberl.trainer.run.driver import TrainOptions, run_training

MANIFEST = """\
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {name: evaluated-on-actors}
spec:
  algorithm: ppo
  env: {id: CartPole-v1}
  config: {seed: 7}
  rollouts: {workers: 0, envsPerWorker: 2, fragmentLength: 32}
  traces: {enabled: false}
  stop: {iterations: 9}
  evaluation: {interval: 4, episodes: 3, workers: 1}
"""


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
