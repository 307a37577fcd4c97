"""`kuberl train` run again on a root whose checkpoint does not fit the manifest (another network): one line naming
the setting, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kuberl_testing.manifests import experiment_manifest

pytestmark = pytest.mark.timeout(300)


def train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = [arg for override in overrides for arg in ("--set", override)]
    return subprocess.run([sys.executable, "-m", "kuberl.cli", "train", "-f", "m.yaml", "--storage", "runs",
                           "--quiet", *args], capture_output=True, text=True, timeout=180, cwd=tmp_path)


def test_resuming_with_another_network_names_the_setting(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(experiment_manifest("net", stop={"iterations": 1}))
    first = train(tmp_path)
    assert first.returncode == 0, first.stderr

    resumed = train(tmp_path, "config.hidden=[128,128]", "stop.iterations=2")
    assert resumed.returncode == 2, resumed.stderr
    assert "Traceback" not in resumed.stderr
    [line] = resumed.stderr.strip().splitlines()
    assert line.startswith("error: spec.config.hidden: the checkpoint ")
    assert "it was trained with hidden=[64, 64], not hidden=[128, 128]" in line
    assert line.endswith("(use --fresh or another storage.uri)")
    # Another observation filter loads without an error, but the policy would see other inputs: refused too.
    filtered = train(tmp_path, "config.observationFilter=mean_std", "stop.iterations=2")
    assert filtered.returncode == 2, filtered.stderr
    assert filtered.stderr.startswith("error: spec.config.observationFilter: the checkpoint "), filtered.stderr
    assert "it was trained with observationFilter='none', not observationFilter='mean_std'" in filtered.stderr
    resumed = train(tmp_path, "stop.iterations=2")
    assert resumed.returncode == 0, resumed.stderr
