"""The driver's pure decisions and its status server, without training anything."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace

import pytest

from kuberl.api.contract import (
    EXIT_FAILED,
    EXIT_INVALID_SPEC,
    EXIT_SUCCEEDED,
    EXIT_TERMINATED,
    RESULT_FAILED,
    RESULT_INVALID_SPEC,
    RESULT_SUCCEEDED,
    RESULT_TERMINATED,
)
from kuberl.api.types import Phase, StopSpec
from kuberl.trainer.iteration_result import IterationResult
from kuberl.trainer.run.live_status import LiveStatus
from kuberl.trainer.run.metrics import TrainerMetrics, metrics_registry
from kuberl.trainer.run.progress import progress_line
from kuberl.trainer.run.settings import TrainerSettings
from kuberl.trainer.run.status_server import start_status_server
from kuberl.trainer.run.summary import Summary, stop_reason, write_termination_log

RESULT_LINE = {"iteration": 7, "timesteps": 14336, "episodeReturnMean": 212.25, "timeSeconds": 3.5,
               "envStepsPerSecond": 40960.0, "episodes": 90}
RESULT = IterationResult.from_json(RESULT_LINE)


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        (StopSpec(episode_return_mean=200), "episodeReturnMean 212.2 >= 200"),
        (StopSpec(episode_return_mean=450), None),
        (StopSpec(timesteps=14336), "timesteps 14,336 >= 14,336"),
        (StopSpec(timesteps=20000), None),
        (StopSpec(iterations=7), "iteration 7 >= 7"),
        (StopSpec(time_seconds=3), "timeSeconds 4 >= 3"),
        (StopSpec(time_seconds=4), None),
    ],
)
def test_stop_reason(stop, expected):
    assert stop_reason(stop, RESULT) == expected


def test_no_return_yet_never_meets_a_return_target():
    assert stop_reason(StopSpec(episode_return_mean=-1e9), replace(RESULT, episode_return_mean=None)) is None


def test_progress_line_shows_the_figures():
    line = progress_line(RESULT)
    assert "iter     7" in line
    assert "14,336" in line
    assert "40,960 steps/s" in line
    assert "212.2" in line
    assert progress_line(replace(RESULT, episode_return_mean=None)).count(" - ") == 1


def test_exit_codes():
    assert Summary("Succeeded", "", "").exit_code == EXIT_SUCCEEDED == 0
    assert Summary("InvalidSpec", "", "").exit_code == EXIT_INVALID_SPEC == 2
    assert Summary("Terminated", "", "").exit_code == EXIT_TERMINATED == 143
    assert Summary("Failed", "", "").exit_code == EXIT_FAILED == 1


def test_termination_log_is_json_and_bounded(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    monkeypatch.setenv("KUBERL_TERMINATION_LOG", str(path))
    write_termination_log(Summary("Failed", "RuntimeError", "x" * 10_000, iteration=3),
                          TrainerSettings.from_env().termination_log)
    text = path.read_text()
    assert len(text) <= 4000
    assert text.startswith('{"result": "Failed", "reason": "RuntimeError"')


def test_status_server_serves_status_and_metrics():
    status = LiveStatus(attempt=2)
    status.update(phase="Running", iteration=7, timesteps=14336, episodeReturnMean=212.25)
    metrics = TrainerMetrics()
    metrics.on_iteration_end(IterationResult.from_json({**RESULT_LINE, "replay": {"shard_0": {"size": 1234}}}),
                             stopping=False)
    server = start_status_server(status, 0, host="127.0.0.1", registry=metrics_registry(metrics))
    try:
        base = f"http://127.0.0.1:{server.port}"
        body = json.loads(urllib.request.urlopen(f"{base}/status", timeout=5).read())
        assert body["phase"] == "Running"
        assert body["attempt"] == 2
        assert body["iteration"] == 7
        assert body["episodeReturnMean"] == 212.25
        text = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert "kuberl_training_iteration 7.0" in text
        assert 'kuberl_replay_size{shard="shard_0"} 1234.0' in text
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{base}/nope", timeout=5)
    finally:
        server.shutdown()


@pytest.mark.parametrize(("result", "phase"), [
    (RESULT_SUCCEEDED, Phase.SUCCEEDED), (RESULT_FAILED, Phase.FAILED), (RESULT_INVALID_SPEC, Phase.FAILED),
    (RESULT_TERMINATED, Phase.RUNNING),  # a signal: the operator decides what comes next
])
def test_how_a_run_ended_is_its_result_and_the_phase_stays_a_phase(result: str, phase: Phase) -> None:
    status = LiveStatus()
    status.update(phase=Phase.RUNNING)
    status.finish(result)
    snapshot = status.snapshot()
    assert (snapshot["phase"], snapshot["result"]) == (phase, result)
    assert snapshot["phase"] in set(Phase)
