"""`kuberl train` refuses, before training, a replay that cannot fit the memory it would live in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MANIFEST = """
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {{name: too-big}}
spec:
  algorithm: {algorithm}
  env: {{id: "kuberl_testing.image_envs:StackedBeacon", config: {{size: 84}}}}
  rollouts: {{workers: {workers}}}
  replay: {{shards: {shards}, capacity: {capacity}}}
  stop: {{timesteps: 1000}}
"""


def _kuberl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=dict(os.environ))


@pytest.mark.parametrize(("algorithm", "workers", "shards"), [("dqn", 0, 1), ("apex-dqn", 2, 2)])
def test_train_exits_2_naming_the_capacity_and_the_numbers(tmp_path: Path, algorithm: str, workers: int,
                                                           shards: int) -> None:
    manifest = tmp_path / "experiment.yaml"
    # a billion 84x84x4 transitions: about 7 TiB, more than any machine this runs on
    manifest.write_text(MANIFEST.format(algorithm=algorithm, workers=workers, shards=shards, capacity=10**9))
    proc = _kuberl(tmp_path, "train", "-f", str(manifest), "--storage", f"file://{tmp_path}/runs")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "error: spec.replay.capacity: 1,000,000,000 transitions of 7," in proc.stderr
    assert "bytes each (4 x 84x84 uint8 observations)" in proc.stderr
    assert "this machine's available memory" in proc.stderr and "lower spec.replay.capacity to at most" in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_validate_cluster_checks_the_pods_memory(tmp_path: Path) -> None:
    manifest = tmp_path / "experiment.yaml"
    manifest.write_text(MANIFEST.format(algorithm="apex-dqn", workers=2, shards=2, capacity=1_000_000)
                        + "  head: {memory: 2Gi}\n  workers: {replicas: 1, memory: 4Gi}\n")
    proc = _kuberl(tmp_path, "validate", "-f", str(manifest), "--cluster")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "spec.head.memory 2.00 GiB, spec.workers.memory 4.00 GiB" in proc.stderr
    manifest.write_text(manifest.read_text().replace("replicas: 1, memory: 4Gi", "replicas: 2, memory: 8Gi"))
    proc = _kuberl(tmp_path, "validate", "-f", str(manifest), "--cluster")
    assert "spec.replay.capacity" not in proc.stderr, proc.stderr[-3000:]
