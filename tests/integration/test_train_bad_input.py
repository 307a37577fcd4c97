"""`kuberl train -f` as a user runs it, on representative bad-input cases and hostile manifests.

Each must exit 2 with `error: <field>` on stderr, no traceback, and nothing written to the storage
directory (the matrix runs every case in-process through `kuberl validate`; these prove the real
process and the trainer's env checks, which import the user's module, behave the same).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kuberl_testing.bad_inputs import CASES, BadInput, base_manifest
from kuberl_testing.fault_figures import report_figures

TRAIN_CASES = [c for c in CASES if c.id in {
    "wrong-type-rollouts.workers-many",
    "hostile-stop.episodeReturnMean-nan",
    "hostile-metadata.name-实验_1",
    "unknown-enum-env.id-CartPoel_v1",
    "hostile-env.config-a_a",
}]


def train(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    manifest = tmp_path / "experiment.yaml"
    manifest.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "kuberl.cli", "train", "-f", str(manifest), "--storage", f"file://{tmp_path}/runs"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, **(env or {})})
    return proc, time.perf_counter() - started


def assert_refused(proc: subprocess.CompletedProcess, tmp_path: Path, field: str) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"error: {field}" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "kuberl-runs").exists()


def test_the_cases_are_in_the_table():
    assert len(TRAIN_CASES) == 5


@pytest.mark.parametrize("case", TRAIN_CASES, ids=lambda c: c.id)
def test_train_refuses_before_writing_anything(tmp_path, case: BadInput):
    proc, seconds = train(tmp_path, yaml.safe_dump(case.manifest(), allow_unicode=True))
    assert_refused(proc, tmp_path, case.field_path)
    report_figures(f"kuberl train, {case.kind} ({case.path})", exit_code=proc.returncode, seconds=seconds)


@pytest.mark.parametrize(("code", "message"), [
    ("raise RuntimeError('badmod cannot be imported here')", "cannot be imported here"),
    ("raise SystemExit(0)", "called sys.exit(0)"),  # would have ended the trainer with exit 0: "Succeeded"
], ids=["raises", "exits-0"])
def test_env_module_that_fails_on_import_is_a_clean_error(tmp_path, code, message):
    (tmp_path / "badmod.py").write_text(code + "\n")
    doc = base_manifest()
    doc["spec"]["env"]["id"] = "badmod:Env"
    proc, seconds = train(tmp_path, yaml.safe_dump(doc), env={"PYTHONPATH": str(tmp_path)})
    assert_refused(proc, tmp_path, "spec.env.id")
    assert "badmod" in proc.stderr and message in proc.stderr
    report_figures(f"kuberl train, env module whose import runs {code!r}",
                   exit_code=proc.returncode, seconds=seconds)


def test_billion_laughs_is_refused_in_seconds(tmp_path):
    lines = ["x-a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level, prev in zip("bcdefghi", "abcdefgh", strict=True):
        lines.append(f"x-{level}: &{level} [{', '.join([f'*{prev}'] * 9)}]")
    proc, seconds = train(tmp_path, yaml.safe_dump(base_manifest()) + "\n".join(lines) + "\n")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "YAML nodes" in proc.stderr  # refused by the node limit, before expanding anything
    # The hang guard is train()'s 120 s timeout: expanding 9^9 nodes would run far past it.
    report_figures("kuberl train, billion laughs", exit_code=proc.returncode, seconds=seconds)
    assert not (tmp_path / "runs").exists()
