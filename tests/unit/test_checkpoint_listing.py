"""`kuberl checkpoints`' rows: returns from results.jsonl, evaluations by the iteration they played, latest
by attempt then iteration, best by evaluation return else training return; the table and sizes."""

from __future__ import annotations

from typing import Any

from kuberl.trainer.iteration_result import ResultLine, line_from_json
from kuberl.trainer.storage.base import CheckpointInfo
from kuberl.trainer.storage.checkpoint_listing import (
    checkpoint_rows,
    checkpoints_table,
    human_bytes,
    window_return,
)


def info(iteration: int, attempt: int = 1, size: int = 1000) -> CheckpointInfo:
    key = f"checkpoints/{iteration:06d}"
    return CheckpointInfo(iteration=iteration, key=key, uri=f"file:///r/{key}", timesteps=iteration * 100,
                          attempt=attempt, files={"model.pt": size, "counters.json": 24})


def lines(records: list[dict[str, Any]]) -> list[ResultLine]:
    return [line_from_json(record) for record in records]


RESULTS = lines([
    {"iteration": 1, "timesteps": 100, "episodeReturnMean": 10.0},
    {"iteration": 2, "timesteps": 200, "episodeReturnMean": 30.0},
    # The evaluation of iteration 2's policy arrives on iteration 3's line.
    {"iteration": 3, "timesteps": 300, "episodeReturnMean": 25.0,
     "evaluation": {"iteration": 2, "returnMean": 150.0}},
    {"iteration": 4, "timesteps": 400, "episodeReturnMean": 50.0},
    {"iteration": 4, "timesteps": 400, "evaluation": {"iteration": 4, "returnMean": 120.0}},  # a line of its own
])


def test_best_by_evaluation_return_latest_by_attempt_then_iteration():
    rows = checkpoint_rows([info(4, attempt=2), info(2), info(3, attempt=2)], RESULTS)
    assert [(r.iteration, r.episodeReturnMean, r.evaluationReturnMean) for r in rows] == [
        (2, 30.0, 150.0), (3, 25.0, None), (4, 50.0, 120.0)]
    assert [r.iteration for r in rows if r.best] == [2]  # not 4, which trained better but evaluated worse
    assert [r.iteration for r in rows if r.latest] == [4]
    assert rows[0].bytes == 1024 and rows[0].timesteps == 200 and rows[0].uri.endswith("000002")


def test_without_evaluations_best_is_by_training_return():
    rows = checkpoint_rows([info(1), info(2), info(4)], [r for r in RESULTS if r.evaluation is None])
    assert [r.iteration for r in rows if r.best] == [4] and [r.iteration for r in rows if r.latest] == [4]


def test_a_tie_goes_to_the_older_checkpoint():
    tied = lines([{"iteration": 2, "timesteps": 200, "evaluation": {"iteration": 2, "returnMean": 500.0}},
                  {"iteration": 4, "timesteps": 400, "evaluation": {"iteration": 4, "returnMean": 500.0}}])
    assert [r.iteration for r in checkpoint_rows([info(2), info(4)], tied) if r.best] == [2]


def test_latest_follows_the_newest_attempt_even_at_a_lower_iteration():
    rows = checkpoint_rows([info(6, attempt=1), info(4, attempt=2)], [])
    assert [r.iteration for r in rows if r.latest] == [4]
    assert not any(r.best for r in rows)  # nothing scored: no best
    assert rows[0].episodeReturnMean is None


def test_table_and_sizes():
    rows = checkpoint_rows([info(2), info(4, size=5 * 1024 * 1024)], RESULTS)
    text = checkpoints_table(rows, run_uri="file:///r")
    lines = text.splitlines()
    assert lines[0].split() == ["ITERATION", "TIMESTEPS", "RETURN", "EVAL", "RETURN", "SIZE", "ATTEMPT"]
    assert lines[1].split() == ["2", "200", "30.00", "150.00", "1.0", "KiB", "1", "best"]
    assert lines[2].split()[-1] == "latest" and "5.0 MiB" in lines[2]
    assert lines[-1] == "2 checkpoint(s) in file:///r; best by evaluation return"
    assert checkpoints_table([], run_uri="file:///r") == "file:///r: no complete checkpoints"
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 3 * 1024**3)] == ["0 B", "1023 B", "1.0 KiB", "1.5 KiB",
                                                                            "3.0 GiB"]


def test_a_run_without_results_scores_each_checkpoint_by_its_return_window():
    assert window_return(b'{"iteration": 2, "returnWindow": [10.0, 30.0]}') == 20.0
    assert window_return(b'{"iteration": 1, "returnWindow": []}') is None
    assert window_return(b"not json") is None
    rows = checkpoint_rows([info(1), info(2)], [], {2: 20.0})
    assert [(r.iteration, r.episodeReturnMean, r.best) for r in rows] == [(1, None, False), (2, 20.0, True)]
