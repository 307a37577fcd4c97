"""`python -m kuberl_testing.controlplane start` leaves a working control plane behind it, and
`stop` ends exactly the processes that `start` recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kuberl_testing.controlplane.cluster import STATE_FILE

KUBECTL = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "kubectl"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kuberl_testing.controlplane", *args], capture_output=True,
                          text=True, timeout=300, env=os.environ)


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_start_then_stop_by_recorded_pids(tmp_path: Path) -> None:
    work_dir = tmp_path / "cp"
    started = _cli("start", "--dir", str(work_dir))
    state = json.loads((work_dir / STATE_FILE).read_text()) if (work_dir / STATE_FILE).exists() else None
    try:
        assert started.returncode == 0, started.stderr
        assert f"export KUBECONFIG={work_dir / 'admin.kubeconfig'}" in started.stdout
        assert state is not None
        names = [p["name"] for p in state["processes"]]
        assert names == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
        assert all(_exists(p["pid"]) for p in state["processes"])  # `start` returned, they stay
        ready = subprocess.run([str(KUBECTL), "--kubeconfig", state["kubeconfig"], "get", "--raw", "/readyz"],
                               capture_output=True, text=True, timeout=60)
        assert ready.stdout.strip() == "ok", ready.stderr
    finally:
        stopped = _cli("stop", "--dir", str(work_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == "stopped: kube-scheduler, kube-controller-manager, kube-apiserver, etcd"
    assert not any(_exists(p["pid"]) for p in state["processes"])
    assert _cli("stop", "--dir", str(work_dir)).stdout.strip() == "stopped: nothing was running"


def test_missing_binaries_are_named(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "kuberl_testing.controlplane", "start", "--dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "KUBERL_CONTROL_PLANE_BIN": str(tmp_path / "empty")})
    assert result.returncode == 1
    assert "etcd, kube-apiserver not found in" in result.stderr and "make control-plane" in result.stderr
    assert "Traceback" not in result.stderr
