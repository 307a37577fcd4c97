"""The cluster CLI and kuberl.client on a whole cluster (the operator, real trainer pods, S3): an
experiment submitted with `kuberl submit --wait` runs to Succeeded; `kuberl status`, `list` and `logs`
show it; the client reads its results and checkpoints; and once it is deleted, pods and all, its
output is still read back from the run's storage.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from experiments import tiny_ppo, unique_name

from kuberl.client import Client

pytestmark = pytest.mark.timeout(600)

TRAINER_STARTED = "training ppo on CartPole-v1"  # the trainer's first line (run/training_run.py)


def _env(cluster: Any) -> dict[str, str]:
    credentials = cluster.s3_credentials()
    kubeconfig = getattr(cluster, "kubeconfig", None) or os.environ.get("KUBECONFIG", "")
    return {**os.environ, "KUBECONFIG": str(kubeconfig), "AWS_ACCESS_KEY_ID": credentials["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": credentials["aws_secret_access_key"], "AWS_REGION": credentials["region_name"]}


def _kuberl(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True, timeout=540,
                          env=_env(cluster))


def test_submit_wait_status_logs_and_logs_after_delete(cluster, experiments, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    name = unique_name("cli")
    manifest = tmp_path / "experiment.yaml"
    manifest.write_text(yaml.safe_dump(tiny_ppo(name, cluster)))
    ns = cluster.namespace
    submitted = subprocess.Popen([sys.executable, "-m", "kuberl.cli", "submit", "-f", str(manifest), "--wait",
                                  "--timeout", "480"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=_env(cluster))
    # Following from before the head starts: pod log or storage, whichever there is; it ends with the run.
    experiments.wait(name, lambda: experiments.get(name), "the experiment to exist", timeout=60)
    follow = subprocess.Popen([sys.executable, "-m", "kuberl.cli", "logs", name, "-n", ns, "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cluster))
    out, err = submitted.communicate(timeout=540)
    assert submitted.returncode == 0, f"{out}\n{err}\n{experiments.explain(name)}"
    assert out.splitlines()[0] == f"rlexperiment.kuberl.io/{name} created in namespace {ns}"
    assert f"{name}: Succeeded" in out and "last checkpoint s3://" in out
    followed, follow_err = follow.communicate(timeout=120)
    assert follow.returncode == 0, follow_err
    assert TRAINER_STARTED in followed, (followed[-2000:], follow_err)

    status = _kuberl(cluster, "status", name, "-n", ns)
    assert status.returncode == 0, status.stderr
    assert "Phase:       Succeeded (attempt 1)" in status.stdout and "checkpoints/" in status.stdout
    assert "Succeeded" in status.stdout.split("Events:")[1]  # the operator's event for the phase
    listed = _kuberl(cluster, "list", "-n", ns)  # both kinds: names qualified by their kind, as kubectl get rlx,rls
    assert any(line.split()[:2] == [f"rlexperiment.kuberl.io/{name}", "Succeeded"]
               for line in listed.stdout.splitlines()), listed.stdout

    logs = _kuberl(cluster, "logs", name, "-n", ns, "--endpoint", cluster.local_s3_endpoint)
    assert logs.returncode == 0, logs.stderr
    assert TRAINER_STARTED in logs.stdout and "Succeeded:" in logs.stdout, (logs.stdout[-2000:], logs.stderr)

    for key, value in _env(cluster).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    client = Client(str(_env(cluster)["KUBECONFIG"]), namespace=ns)
    results = client.results(name, endpoint=cluster.local_s3_endpoint)
    assert [r["iteration"] for r in results] == list(range(1, len(results) + 1)) and results[-1]["timesteps"] >= 2560
    checkpoints = client.checkpoints(name, endpoint=cluster.local_s3_endpoint)
    assert checkpoints and checkpoints[-1].iteration == results[-1]["iteration"]
    local = client.download_checkpoint(name, tmp_path / "run", endpoint=cluster.local_s3_endpoint)
    assert (local / "manifest.json").is_file() and local.name == checkpoints[-1].key.rsplit("/", 1)[1]

    deleted = _kuberl(cluster, "delete", name, "-n", ns, "--wait", "--timeout", "120")
    assert deleted.returncode == 0, deleted.stderr
    experiments.wait(name, lambda: not experiments.pods(name), "the pods to go with the experiment", timeout=120)
    after = _kuberl(cluster, "logs", name, "-n", ns, "--storage", cluster.storage_uri,
                    "--endpoint", cluster.local_s3_endpoint)
    assert after.returncode == 0, after.stderr
    assert "attempt 1" in after.stderr and cluster.storage_uri in after.stderr
    assert TRAINER_STARTED in after.stdout and "Succeeded:" in after.stdout
    assert after.stdout.count(TRAINER_STARTED) == 1
