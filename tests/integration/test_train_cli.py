"""`kuberl train` end to end on local files: results, checkpoints, traces, resume, --fresh, SIGTERM."""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")

MANIFEST = """\
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {{name: tiny}}
spec:
  algorithm: {algorithm}
  env: {{id: CartPole-v1}}
  config: {{seed: 3}}
  rollouts: {{workers: 0, envsPerWorker: 4, fragmentLength: 32}}
  stop: {{iterations: {iterations}}}
  checkpoint: {{everyIterations: 1, keep: 2}}
"""

RESULT_KEYS = {"iteration", "timesteps", "episodes", "episodeReturnMean", "envStepsPerSecond", "timeSeconds"}
EPISODE_KEYS = {"experiment", "worker", "episode", "env", "return", "length", "policyVersion", "startTime", "endTime"}


def manifest(tmp_path: Path, iterations: int = 3, algorithm: str = "ppo") -> str:
    path = tmp_path / f"tiny-{algorithm}-{iterations}.yaml"
    path.write_text(MANIFEST.format(iterations=iterations, algorithm=algorithm))
    return str(path)


def kuberl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]


def test_train_writes_results_checkpoints_and_traces_then_resumes(tmp_path):
    proc = kuberl("train", "-f", manifest(tmp_path, 3), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Succeeded: iteration 3 >= 3" in proc.stdout
    run = tmp_path / "kuberl-runs" / "tiny"
    lines = results(run)
    assert [r["iteration"] for r in lines] == [1, 2, 3]
    assert set(lines[0]) >= RESULT_KEYS
    assert all(b["timesteps"] > a["timesteps"] for a, b in zip(lines, lines[1:], strict=False))

    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir())
    # The background writer may coalesce a checkpoint it had no time for; keep: 2 bounds what stays.
    assert checkpoints[-1] == "000003" and len(checkpoints) <= 2, checkpoints
    manifest_json = json.loads((run / "checkpoints" / "000003" / "manifest.json").read_text())
    assert manifest_json["iteration"] == 3
    assert "experiment.yaml" in manifest_json["files"]
    assert (run / "checkpoints" / "latest").exists()

    records = []
    for chunk in sorted((run / "traces").glob("episodes-*.jsonl.gz")):
        records += [json.loads(line) for line in gzip.decompress(chunk.read_bytes()).decode().splitlines()]
    assert records, "episodes finished, so traces must exist"
    assert set(records[0]) >= EPISODE_KEYS
    assert records[0]["experiment"] == "tiny"

    # The same manifest with a later stop resumes from iteration 3 instead of starting over.
    proc = kuberl("train", "-f", manifest(tmp_path, 5), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "resuming from" in proc.stdout and "iteration 3" in proc.stdout
    lines = results(run)
    assert [r["iteration"] for r in lines] == [1, 2, 3, 4, 5]
    assert lines[3]["timesteps"] > lines[2]["timesteps"], "timesteps never go backwards after a resume"

    # evaluate and traces read what train wrote.
    proc = kuberl("evaluate", str(run), "--episodes", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "iteration 5" in proc.stdout and "return mean" in proc.stdout
    proc = kuberl("traces", str(run), "--png", str(tmp_path / "curve.png"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_fresh_starts_a_new_run_and_a_changed_algorithm_is_refused(tmp_path):
    assert kuberl("train", "-f", manifest(tmp_path, 1), cwd=tmp_path).returncode == 0
    proc = kuberl("train", "-f", manifest(tmp_path, 1, algorithm="dqn"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "error: spec.algorithm: the run at" in proc.stderr and "--fresh" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = kuberl("train", "-f", manifest(tmp_path, 1), "--fresh", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    runs = sorted(p.name for p in (tmp_path / "kuberl-runs").iterdir())
    assert len(runs) == 2 and runs[0] == "tiny" and runs[1].startswith("tiny-")
    assert "resuming" not in proc.stdout


def test_set_overrides_reach_the_algorithm(tmp_path):
    proc = kuberl("train", "-f", manifest(tmp_path, 1), "--set", "config.lr=0.000123",
                  "--set", "rollouts.envsPerWorker=2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [line] = results(tmp_path / "kuberl-runs" / "tiny")
    assert line["learner"]["lr"] == pytest.approx(0.000123)
    assert 32 < line["timesteps"] <= 2 * 32, "2 envs x 32 steps (the default 4 envs would give ~128)"


def wait_for_two_iterations(run: Path) -> None:
    deadline = time.monotonic() + 120  # a hang guard
    while time.monotonic() < deadline and not ((run / "results.jsonl").exists() and len(results(run)) >= 2):
        time.sleep(0.2)


def test_sigterm_writes_a_final_checkpoint_and_exits(tmp_path):
    path = manifest(tmp_path, 100_000)
    proc = subprocess.Popen([sys.executable, "-m", "kuberl.cli", "train", "-f", path], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "kuberl-runs" / "tiny"
    wait_for_two_iterations(run)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Terminated: stopped by SIGTERM after a final checkpoint" in out
    last = results(run)[-1]["iteration"]
    latest = json.loads((run / "checkpoints" / "latest").read_text())
    assert latest["iteration"] == last, "the final checkpoint is the last finished iteration"


def test_ctrl_c_writes_a_final_checkpoint_and_exits_130(tmp_path):
    path = manifest(tmp_path, 100_000)
    # SIGINT at its default in the child: a shell without job control starts background commands ignoring it.
    proc = subprocess.Popen([sys.executable, "-m", "kuberl.cli", "train", "-f", path], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    run = tmp_path / "kuberl-runs" / "tiny"
    wait_for_two_iterations(run)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground process group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Terminated: stopped by SIGINT after a final checkpoint" in out
    latest = json.loads((run / "checkpoints" / "latest").read_text())
    assert latest["iteration"] == results(run)[-1]["iteration"], "the final checkpoint: the last iteration's"


def kuberl_to_a_gone_reader(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`kuberl ARGS | head -0`: stdout is a pipe whose reader has gone before the first line."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=300, cwd=cwd)
    finally:
        os.close(write)


def test_a_reader_that_goes_away_neither_stops_a_run_nor_prints_a_traceback(tmp_path):
    proc = kuberl_to_a_gone_reader("train", "-f", manifest(tmp_path, 2), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # `kuberl train ... | head -3`: the run goes on to its end
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    run = tmp_path / "kuberl-runs" / "tiny"
    assert [r["iteration"] for r in results(run)] == [1, 2]
    for command in (["checkpoints", str(run), "-o", "json"], ["info", str(run)], ["crd"]):
        proc = kuberl_to_a_gone_reader(*command, cwd=tmp_path)
        assert (proc.returncode, proc.stderr) == (141, ""), command  # as `yes | head` ends: 128 + SIGPIPE


def test_the_custom_env_command_of_the_python_api_page_trains_as_written(tmp_path):
    page = (ROOT / "docs" / "python-api.md").read_text()
    [command] = re.findall(r"`(PYTHONPATH=examples kuberl train -f examples/custom-env\.yaml[^`]*)`", page)
    assignment, _, arguments = command.partition(" kuberl ")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {name: value for name, value in os.environ.items() if name not in AWS_VARIABLES}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true", KUBERL_STORAGE_RETRY_SECONDS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (assignment.partition("=")[2], env.get("PYTHONPATH")) if p)
    command_line = [sys.executable, "-m", "kuberl.cli", *shlex.split(arguments), "--set", "stop.iterations=1"]
    proc = subprocess.run(command_line, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Succeeded: iteration 1 >= 1" in proc.stdout
