"""The typed iteration result and results.jsonl: real lines, as trainers wrote them, read into the types and
written back byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kuberl.trainer.iteration_result import (
    EvaluationLine,
    EvaluationResult,
    IterationResult,
    LearnerStats,
    StepResult,
    line_from_json,
)
from kuberl.trainer.storage.jsonl import dumps_record

# One or more lines of each algorithm's results.jsonl, written by `kuberl train` (PPO's first line carries the
# task defaults; ppo-eval's lines carry evaluations and end with an evaluation's line of its own).
LINES = Path(__file__).parent.parent / "fixtures" / "results"


def _lines() -> list[tuple[str, str]]:
    return [(f"{path.stem}:{number}", line) for path in sorted(LINES.glob("*.jsonl"))
            for number, line in enumerate(path.read_text().splitlines(), 1) if line]


@pytest.mark.parametrize(("where", "line"), _lines(), ids=[where for where, _ in _lines()])
def test_a_written_line_reads_into_the_types_and_back_byte_for_byte(where: str, line: str) -> None:
    typed = line_from_json(json.loads(line))
    assert dumps_record(typed.to_json()) == line


def test_the_fixtures_cover_every_section() -> None:
    typed = [line_from_json(json.loads(line)) for _, line in _lines()]
    results = [r for r in typed if isinstance(r, IterationResult)]
    assert any(isinstance(r, EvaluationLine) for r in typed)
    assert any(r.evaluation is not None for r in results)
    assert any(r.defaults is not None for r in results)
    assert any(r.step.replay is not None and r.step.replay.shards for r in results)
    assert any(r.step.placement for r in results)
    assert any(r.step.workers for r in results)
    assert any(r.step.policies and r.step.agents for r in results)
    assert any(r.learner is not None and r.learner.policy_lag_mean is not None for r in results)


def test_typed_fields_read_the_camel_case_keys() -> None:
    where, line = next((w, ln) for w, ln in _lines() if w.startswith("ppo-eval"))
    data = json.loads(line)
    typed = IterationResult.from_json(data)
    assert (typed.iteration, typed.timesteps, typed.episodes) == (data["iteration"], data["timesteps"], data["episodes"])
    assert typed.episode_return_mean == data["episodeReturnMean"]
    assert typed.learner is not None and typed.learner.lr == data["learner"]["lr"]
    assert typed.learner.updates_total == data["learner"]["updatesTotal"]
    assert typed.step.sampler["workerRestarts"] == data["sampler"]["workerRestarts"]
    assert typed.evaluation is not None and typed.evaluation.return_mean == data["evaluation"]["returnMean"]


def test_keys_a_callback_adds_are_kept_in_their_place_before_the_run_s_own() -> None:
    result = IterationResult(1, 10, 2, 5.0, 100.0, 0.1, 0.1, 1, StepResult(10, learner=LearnerStats({"loss": 0.5})))
    data = result.to_json()
    data["custom"] = {"score": 3}
    again = IterationResult.from_json(data)
    assert again.extra == {"custom": {"score": 3}}
    written = json.loads(dumps_record(again.to_json()))
    assert written["custom"] == {"score": 3} and written["learner"] == {"loss": 0.5}
    assert list(json.loads(dumps_record({**again.to_json()}))) == list(data)


def test_an_evaluation_of_no_episodes_has_no_min_or_max() -> None:
    empty = EvaluationResult.of(3, 300, [], [], seconds=0.5).to_json()
    assert empty == {"iteration": 3, "timesteps": 300, "episodes": 0, "returnMean": None, "returnStd": None,
                     "lengthMean": None, "returns": [], "seconds": 0.5}
    played = EvaluationResult.of(3, 300, [1.0, 3.0], [10, 20]).to_json()
    assert (played["returnMean"], played["returnMin"], played["returnMax"], played["lengthMean"]) == (2.0, 1.0, 3.0, 15.0)
