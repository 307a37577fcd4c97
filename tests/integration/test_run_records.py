"""`kuberl info` and `kuberl checkpoints` on real runs (local and on S3), and a checkpoint of a format this
kuberl cannot read refused by `kuberl train` and `kuberl evaluate` with a clear message (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kuberl import __version__
from kuberl_testing.manifests import experiment_manifest


def kuberl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def manifest(tmp_path: Path, name: str, iterations: int, **spec) -> str:
    path = tmp_path / f"{name}-{iterations}.yaml"
    path.write_text(experiment_manifest(name, stop={"iterations": iterations},
                                        checkpoint={"everyIterations": 2, "keep": 3}, **spec))
    return str(path)


def results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]


@pytest.mark.timeout(400)
def test_info_and_checkpoints_of_a_resumed_local_run_and_an_incompatible_checkpoint(tmp_path: Path) -> None:
    evaluation = {"interval": 2, "episodes": 2}
    first = kuberl(tmp_path, "train", "-f", manifest(tmp_path, "rec", 4, evaluation=evaluation))
    assert first.returncode == 0, first.stderr[-3000:]
    again = kuberl(tmp_path, "train", "-f", manifest(tmp_path, "rec", 6, evaluation=evaluation))
    assert again.returncode == 0, again.stderr[-3000:]
    run = tmp_path / "kuberl-runs" / "rec"

    info = kuberl(tmp_path, "info", str(run))
    assert info.returncode == 0, info.stderr
    assert f"run:        {run.as_uri()}" in info.stdout
    assert "experiment: rec, attempt 1 (records of 2 attempt(s))" in info.stdout
    assert f"versions:   kuberl {__version__}, python " in info.stdout
    assert "env:        gymnasium.envs.classic_control.cartpole from gymnasium " in info.stdout
    assert "worker 0: env seed 3 (4 envs)" in info.stdout and "evaluation episodes: 4198403..4198404" in info.stdout
    record = json.loads(kuberl(tmp_path, "info", run.as_uri(), "-o", "json", "--attempt", "0").stdout)
    assert record["attempt"] == 0 and record["manifest"]["spec"]["stop"] == {"iterations": 4}
    assert record["manifest"]["spec"]["config"]["lr"] == 0.002  # a default the manifest never set
    assert record["machine"]["cpuCount"] == os.cpu_count() and record["versions"]["torch"]
    assert 1 <= record["machine"]["usableCores"] <= len(os.sched_getaffinity(0))
    missing = kuberl(tmp_path, "info", str(run), "--attempt", "7")
    assert missing.returncode == 2 and "--attempt" in missing.stderr and "Traceback" not in missing.stderr

    listed = json.loads(kuberl(tmp_path, "checkpoints", str(run), "-o", "json").stdout)
    assert [c["iteration"] for c in listed] == [2, 4, 6]
    lines = results(run)
    training = {r["iteration"]: r["episodeReturnMean"] for r in lines if "episodeReturnMean" in r}
    evaluations = {r["evaluation"]["iteration"]: r["evaluation"]["returnMean"] for r in lines if "evaluation" in r}
    assert [c["episodeReturnMean"] for c in listed] == [training[i] for i in (2, 4, 6)]
    assert [c["evaluationReturnMean"] for c in listed] == [evaluations[i] for i in (2, 4, 6)]
    assert [c["iteration"] for c in listed if c["latest"]] == [6]
    best = max((c for c in listed), key=lambda c: (c["evaluationReturnMean"], -c["iteration"]))
    assert [c["iteration"] for c in listed if c["best"]] == [best["iteration"]]
    sizes = {c["iteration"]: sum(p.stat().st_size for p in (run / "checkpoints" / f"{c['iteration']:06d}").iterdir()
                                 if p.name != "manifest.json") for c in listed}
    assert {c["iteration"]: c["bytes"] for c in listed} == sizes
    table = kuberl(tmp_path, "checkpoints", str(run))
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:3] == ["ITERATION", "TIMESTEPS", "RETURN"]
    assert table.stdout.splitlines()[3].split()[-1] == ("latest,best" if best["iteration"] == 6 else "latest")

    # A checkpoint of a later format: training refuses to resume from it, and so does evaluate.
    path = run / "checkpoints" / "000006" / "manifest.json"
    written = json.loads(path.read_text())
    assert written["kuberl"] == __version__
    path.write_text(json.dumps({**written, "format": written["format"] + 1, "kuberl": "9.9.9"}))
    refused = kuberl(tmp_path, "train", "-f", manifest(tmp_path, "rec", 8, evaluation=evaluation))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "written by kuberl 9.9.9 in checkpoint format" in refused.stderr
    assert f"kuberl {__version__} reads format" in refused.stderr
    evaluate = kuberl(tmp_path, "evaluate", str(run / "checkpoints" / "000006"), "--episodes", "1")
    assert evaluate.returncode == 2 and "kuberl 9.9.9" in evaluate.stderr and "Traceback" not in evaluate.stderr

    nothing = kuberl(tmp_path, "checkpoints", str(tmp_path / "nowhere"))
    assert nothing.returncode == 2 and "is this a run directory" in nothing.stderr
    assert kuberl(tmp_path, "info", str(tmp_path / "nowhere")).returncode == 2


@pytest.mark.timeout(300)
def test_info_and_checkpoints_read_a_run_on_s3(tmp_path: Path, s3_bucket: str, s3) -> None:
    path = manifest(tmp_path, "remote", 2, storage={"uri": f"s3://{s3_bucket}/runs", "endpoint": s3.endpoint})
    done = kuberl(tmp_path, "train", "-f", path)
    assert done.returncode == 0, done.stderr[-3000:]
    uri = f"s3://{s3_bucket}/runs/remote"
    record = json.loads(kuberl(tmp_path, "info", uri, "--endpoint", s3.endpoint, "-o", "json").stdout)
    assert record["run"] == uri and record["experiment"] == "remote"
    listed = json.loads(kuberl(tmp_path, "checkpoints", uri, "--endpoint", s3.endpoint, "-o", "json").stdout)
    assert [(c["iteration"], c["latest"], c["best"]) for c in listed] == [(2, True, True)]
    assert listed[0]["uri"] == f"{uri}/checkpoints/000002" and listed[0]["bytes"] > 1000
