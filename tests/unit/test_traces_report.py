"""`kuberl traces`: the summary's figures and the learning-curve PNG, from a local run."""

from __future__ import annotations

from pathlib import Path

import pytest

from kuberl.trainer.run.traces_report import report, return_windows, worker_throughput
from kuberl.trainer.storage import StorageError
from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.run import RunStorage


def make_run(root: Path) -> None:
    run = RunStorage(LocalStore(root))
    for i in range(1, 4):
        run.append_result({"iteration": i, "timesteps": i * 1000, "episodes": i * 10,
                           "episodeReturnMean": 10.0 * i, "envStepsPerSecond": 500.0, "timeSeconds": 2.0 * i})
    for worker in ("0", "1"):
        writer = run.trace_writer(worker)
        for k in range(10):
            # worker 0: 10 episodes of 20 steps over 10 s; worker 1: 10 of 40 steps over 10 s.
            length = 20 if worker == "0" else 40
            writer.write({"experiment": "cp", "worker": worker, "episode": k, "env": "CartPole-v1",
                          "return": float(k * (1 if worker == "0" else 2)), "length": length,
                          "policyVersion": k, "startTime": 1000.0 + k, "endTime": 1001.0 + k})
        writer.close()


def test_report_of_a_local_run(tmp_path: Path) -> None:
    make_run(tmp_path / "run")
    text = report(str(tmp_path / "run"), png_path=tmp_path / "curve.png")
    assert "results: 3 iterations, 3,000 env steps" in text
    assert "return mean last 30.0, best 30.0" in text
    assert "episodes: 20 from 2 workers" in text
    lines = text.splitlines()
    worker_rows = {ln.split()[0]: ln.split() for ln in lines[lines.index("per-worker throughput:") + 2:]
                   if ln.strip() and ln.split()[0] in ("0", "1")}
    assert worker_rows["0"][1:4] == ["10", "200", "20"]  # episodes, steps, 200 steps / 10 s
    assert worker_rows["1"][1:4] == ["10", "400", "40"]
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report(f"file://{tmp_path}/run")  # default PNG path: into the run directory
    assert (tmp_path / "run" / "learning-curve.png").stat().st_size > 1000


def test_return_percentiles_per_time_window() -> None:
    episodes = [{"return": float(r), "endTime": t} for t, r in enumerate(range(100))]
    rows = return_windows(episodes, windows=4)
    assert [r["episodes"] for r in rows] == [25, 25, 25, 25]
    assert rows[0]["p50"] == pytest.approx(12.0) and rows[-1]["p50"] == pytest.approx(87.0)
    assert rows[0]["p90"] > rows[0]["p10"]


def test_throughput_without_timing_is_unknown() -> None:
    rows = worker_throughput([{"worker": "a", "length": 5}])
    assert rows == [{"worker": "a", "episodes": 1, "steps": 5, "seconds": 0.0, "stepsPerSecond": None}]


def test_not_a_run_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no results.jsonl and no traces"):
        report(str(tmp_path / "empty"))


def test_an_evaluation_line_of_its_own_is_no_iteration(tmp_path: Path) -> None:
    # A run whose last evaluation finished after its last iteration's line: results.jsonl ends with a line
    # that holds only that evaluation (a real file: two iterations, three lines).
    fixture = Path(__file__).parents[1] / "fixtures" / "results" / "ppo-eval.jsonl"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl").write_bytes(fixture.read_bytes())
    text = report(str(tmp_path / "run"), png_path=tmp_path / "curve.png")
    assert "results: 2 iterations" in text
    assert "return mean last 22.9, best 22.9" in text
    assert "evaluations: 3" in text and "iteration 2: return mean 79.50" in text


def test_the_checkpoints_of_a_run_score_by_the_evaluations_its_results_hold() -> None:
    import json

    from kuberl.trainer.iteration_result import line_from_json
    from kuberl.trainer.storage.checkpoint_listing import returns_by_iteration

    fixture = Path(__file__).parents[1] / "fixtures" / "results" / "ppo-eval.jsonl"
    raw = [json.loads(line) for line in fixture.read_text().splitlines()]
    training, evaluation = returns_by_iteration([line_from_json(line) for line in raw])
    assert training == {line["iteration"]: line["episodeReturnMean"] for line in raw if "episodeReturnMean" in line}
    assert evaluation == {line["evaluation"]["iteration"]: line["evaluation"]["returnMean"] for line in raw}
