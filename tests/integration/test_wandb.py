"""spec.tracking.wandb in W&B's offline mode, read back with W&B's own reader of a run's `.wandb` log
(`wandb leet inspect --json`): the config, every scalar by env step, an evaluation video, the final
checkpoint and policy as artifacts; a resumed run continuing the same W&B run; offline files copied
into an S3 run's storage; and a W&B server that cannot be reached never stopping training.

Nothing here leaves the machine: offline mode writes files only, W&B's base URL is a closed loopback
port, and W&B's system-stats and machine-info probes (which may ask a cloud metadata address) are off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kuberl_testing.manifests import experiment_manifest

CLOSED_PORT_URL = "http://127.0.0.1:9"  # the discard port: nothing listens there


def wandb_env(tmp_path: Path) -> dict[str, str]:
    return {"WANDB_BASE_URL": CLOSED_PORT_URL, "WANDB__DISABLE_STATS": "true", "WANDB__DISABLE_MACHINE_INFO": "true",
            "WANDB_DATA_DIR": str(tmp_path / "wandb-data"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_API_KEY": "", "OMP_NUM_THREADS": "1"}


def write_manifest(tmp_path: Path, name: str, iterations: int, *, mode: str = "offline", **spec: Any) -> Path:
    path = tmp_path / f"{name}-{iterations}.yaml"
    path.write_text(experiment_manifest(
        name, stop={"iterations": iterations},
        checkpoint={"everyIterations": 2, "keep": 2, "export": ["torchscript"]},
        tracking={"wandb": {"project": "kuberl-tests", "entity": "lab", "group": "cartpole", "tags": ["ppo", "ci"],
                            "mode": mode}},
        **spec,
    ))
    return path


def train(tmp_path: Path, manifest: Path, *args: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", "train", "-f", str(manifest), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **wandb_env(tmp_path), **(env or {})})


def inspect(run_dir: Path) -> list[dict[str, Any]]:
    """W&B's own reader of a `.wandb` transaction log: one JSON object per record."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def records(log: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r[kind] for r in log if r["type"] == kind]


def results(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]


def offline_runs(run: Path) -> list[Path]:
    return sorted((run / "wandb").glob("offline-run-*"))


@pytest.mark.timeout(600)
def test_offline_run_holds_config_scalars_by_env_step_video_and_artifacts_and_a_resume_continues_it(
        tmp_path: Path) -> None:
    evaluation = {"interval": 2, "episodes": 2, "video": {"everyEvaluations": 1}}
    done = train(tmp_path, write_manifest(tmp_path, "tracked", 4, evaluation=evaluation))
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "kuberl-runs" / "tracked"
    stored = json.loads((run / "tracking" / "wandb.json").read_text())
    (first,) = offline_runs(run)
    assert first.name.endswith(stored["runId"])
    log = inspect(first)

    (header,) = records(log, "run")
    assert header["run_id"] == stored["runId"] and header["project"] == "kuberl-tests" and header["entity"] == "lab"
    assert header["run_group"] == "cartpole" and header["tags"] == ["ppo", "ci"]
    config = header["config"]["update"]
    assert config["algorithm"] == "ppo" and config["env"]["id"] == "CartPole-v1"
    assert config["rollouts"]["envsPerWorker"] == 4 and config["checkpoint"]["export"] == ["torchscript"]
    assert config["kuberl"]["experiment"] == "tracked" and config["kuberl"]["run"] == run.as_uri()
    assert "apiKey" not in json.dumps(config)

    # Every scalar of every result, with env steps as W&B's step metric.
    assert {"name": "timesteps", "options": {"defined": True}} in records(log, "metric")
    assert any(m.get("glob_name") == "*" and m.get("step_metric") == "timesteps" for m in records(log, "metric"))
    rows = [h["item"] for h in records(log, "history")]
    lines = results(run)
    assert [(r["timesteps"], r["iteration"]) for r in rows] == [(r["timesteps"], r["iteration"]) for r in lines]
    assert [round(r["learner/policyLoss"], 6) for r in rows] == [round(r["learner"]["policyLoss"], 6) for r in lines]
    evaluated = [r for r in rows if "evaluation/returnMean" in r]
    assert evaluated and all(r["evaluation/video._type"] == "video-file" for r in evaluated)
    for row in evaluated:  # the MP4 of the evaluation that played this iteration's policy, in the run's files
        video = first / "files" / row["evaluation/video.path"]
        assert video.stat().st_size == row["evaluation/video.size"] > 1000

    artifacts = {a["name"]: a for a in records(log, "artifact")}
    assert set(artifacts) == {"tracked-checkpoint", "tracked-policy"}
    checkpoint_files = {c["path"] for c in artifacts["tracked-checkpoint"]["manifest"]["contents"]}
    assert {"model.pt", "optimizer.pt", "counters.json", "experiment.yaml"} <= checkpoint_files
    (policy,) = artifacts["tracked-policy"]["manifest"]["contents"]
    assert policy["path"] == "policy.pt" and Path(policy["local_path"]).is_file()  # inside the run's wandb/
    assert Path(policy["local_path"]).is_relative_to(run / "wandb")
    assert records(log, "exit")[-1]["exit_code"] == 0

    # A second `kuberl train` resumes from the checkpoint and continues the same W&B run.
    again = train(tmp_path, write_manifest(tmp_path, "tracked", 6, evaluation=evaluation))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from" in again.stdout
    assert json.loads((run / "tracking" / "wandb.json").read_text())["runId"] == stored["runId"]
    second = next(p for p in offline_runs(run) if p != first)
    log = inspect(second)
    (header,) = records(log, "run")
    assert header["run_id"] == stored["runId"] and header["resume"] is True
    assert records(log, "config")[-1]["update"]["kuberl"]["attempt"] == 1
    resumed = [h["item"]["iteration"] for h in records(log, "history")]
    assert resumed == [5, 6]


@pytest.mark.timeout(300)
def test_offline_files_of_a_run_on_s3_are_copied_into_its_storage(tmp_path: Path, s3_bucket: str, s3) -> None:
    manifest = write_manifest(tmp_path, "remote", 2, storage={"uri": f"s3://{s3_bucket}/runs",
                                                              "endpoint": s3.endpoint})
    done = train(tmp_path, manifest)
    assert done.returncode == 0, done.stderr[-3000:]
    client = s3.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="runs/remote/wandb/")["Contents"]]
    (log_key,) = [k for k in keys if k.endswith(".wandb")]
    local = tmp_path / "copy" / Path(log_key).parent.name
    local.mkdir(parents=True)
    client.download_file(s3_bucket, log_key, str(local / Path(log_key).name))
    log = inspect(local)
    assert [h["item"]["iteration"] for h in records(log, "history")] == [1, 2]
    assert {a["name"] for a in records(log, "artifact")} == {"remote-checkpoint", "remote-policy"}
    assert any("/kuberl-artifacts/" in k and k.endswith("policy.pt") for k in keys)


@pytest.mark.timeout(300)
def test_an_unreachable_server_is_a_warning_and_training_goes_on(tmp_path: Path) -> None:
    env = {"WANDB_API_KEY": "k" * 40, "KUBERL_WANDB_INIT_SECONDS": "2", "KUBERL_WANDB_CLOSE_SECONDS": "3"}
    done = train(tmp_path, write_manifest(tmp_path, "unreachable", 4, mode="online"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "W&B is unavailable" in done.stderr and done.stderr.count("W&B is unavailable") == 1
    run = tmp_path / "kuberl-runs" / "unreachable"
    assert [r["iteration"] for r in results(run)] == [1, 2, 3, 4]
    assert (run / "exports" / "policy-000004.pt").exists()  # the rest of the run went on as usual


@pytest.mark.timeout(300)
def test_no_api_key_turns_wandb_off_with_one_warning(tmp_path: Path) -> None:
    done = train(tmp_path, write_manifest(tmp_path, "nokey", 2, mode="online"),
                 env={"HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "W&B has no API key" in done.stderr and "apiKeySecretRef" in done.stderr
    assert [r["iteration"] for r in results(tmp_path / "kuberl-runs" / "nokey")] == [1, 2]
