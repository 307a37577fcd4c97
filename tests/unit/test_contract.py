"""The trainer/operator contract (kuberl.api.contract): both sides speak it, and nothing else writes it."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from kuberl.api import contract
from kuberl.operator.status import pod_state
from kuberl.trainer.run.live_status import LiveStatus
from kuberl.trainer.run.settings import TrainerSettings
from kuberl.trainer.run.summary import Summary, write_termination_log

SRC = Path(__file__).resolve().parents[2] / "src" / "kuberl"


def test_the_trainer_writes_the_summary_and_status_keys_the_operator_reads():
    assert {f.name for f in dataclasses.fields(Summary)} - {"runUri"} == set(contract.SUMMARY_KEYS)
    assert {f.name for f in dataclasses.fields(LiveStatus)} - {"lock"} == set(contract.STATUS_KEYS)
    assert set(contract.PROGRESS_KEYS) <= set(contract.SUMMARY_KEYS) & set(contract.STATUS_KEYS)


def test_a_termination_log_reads_back_as_the_operator_sees_it(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    monkeypatch.setenv(contract.ENV_TERMINATION_LOG, str(path))
    summary = Summary(contract.RESULT_INVALID_SPEC, "StorageError", "no such bucket", iteration=3, timesteps=96,
                      runUri="s3://b/run")
    write_termination_log(summary, TrainerSettings.from_env().termination_log)
    pod = {"metadata": {"name": "x-head", "labels": {contract.ROLE_LABEL: contract.HEAD_ROLE}},
           "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {
               "exitCode": summary.exit_code, "message": path.read_text()}}}]}}
    state = pod_state(pod)
    assert state.exit_code == contract.EXIT_INVALID_SPEC == 2
    assert state.termination == {"result": "InvalidSpec", "reason": "StorageError", "message": "no such bucket",
                                 "iteration": 3, "timesteps": 96, "episodeReturnMean": None,
                                 "evaluationReturnMean": None, "lastCheckpoint": None}
    assert set(json.loads(path.read_text())) == set(contract.SUMMARY_KEYS)


@pytest.mark.parametrize(("result", "code"), [("Succeeded", 0), ("InvalidSpec", 2), ("Terminated", 143),
                                              ("Failed", 1), ("anything else", 1)])
def test_exit_codes(result, code):
    assert contract.exit_code_for(result) == code


@pytest.mark.parametrize(("signal_name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_run_stopped_by_ctrl_c_exits_130_and_by_sigterm_143(signal_name, code):
    summary = Summary(contract.RESULT_TERMINATED, signal_name, f"stopped by {signal_name} after a checkpoint")
    assert summary.exit_code == code


def _contract_literals() -> dict[object, str]:
    """Values of the contract's names that should appear as a literal nowhere else in src/."""
    values: dict[object, str] = {}
    for name, value in vars(contract).items():
        if name.isupper() and isinstance(value, str) and ("/" in value or value.startswith(("KUBERL_", "AWS_"))):
            values[value] = name
    values[contract.DEFAULT_STATUS_PORT] = "DEFAULT_STATUS_PORT"
    return values


def test_each_contract_literal_is_written_once():
    literals = _contract_literals()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "contract.py" and path.parent.name == "api":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and type(node.value) in (str, int) and node.value in literals:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r} is contract.{literals[node.value]}")
    assert not found, "\n".join(found)
