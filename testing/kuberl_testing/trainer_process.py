"""`kuberl train` as a child process for fault tests, and the checks and figures they share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kuberl.trainer.storage.base import ObjectStore
from kuberl.trainer.storage.run import RunStorage
from kuberl_testing.manifests import experiment_manifest

KUBERL = str(Path(sys.executable).parent / "kuberl")
GRACE_SECONDS = 30.0  # a pod's default terminationGracePeriodSeconds


def ppo_manifest(name: str, storage: str, stop: str, every: int, endpoint: str | None = None) -> str:
    """A small PPO run (one process, no Ray workers) writing to `storage`; `stop` is YAML flow text."""
    return experiment_manifest(
        name, stop=yaml.safe_load(stop), checkpoint={"everyIterations": every, "keep": 50},
        traces={"enabled": True}, storage={"uri": storage, **({"endpoint": endpoint} if endpoint else {})},
    )


class Trainer:
    """A `kuberl train` process in its own session, its output collected line by line."""

    def __init__(self, path: Path, env: dict[str, str], argv_prefix: list[str] | None = None) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [*(argv_prefix or []), KUBERL, "train", "-f", str(path)], cwd=path.parent, env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def iterations_seen(self) -> int:
        its = [int(ln.split()[1]) for ln in list(self.lines) if ln.startswith("iter ")]
        return max(its, default=0)

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # the trainer dumps every thread's stack
            time.sleep(3)
            raise AssertionError(f"the trainer did not exit in {timeout} s:\n{self.output(200)}") from None
        self._reader.join(timeout=5)
        return rc

    def terminate(self, timeout: float = GRACE_SECONDS) -> tuple[int, float]:
        """SIGTERM as the kubelet sends it; (exit code, seconds to exit). Fails past `timeout`."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        return rc, time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # our own session: the trainer and any child
        self.proc.wait(timeout=30)

    def output(self, lines: int = 40) -> str:
        return "\n".join(self.lines[-lines:])


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll until `condition()` holds; the seconds it took."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - started


def assert_results_contiguous(store: ObjectStore) -> list[dict]:
    """results.jsonl holds iterations 1..N, each once, with timesteps strictly increasing."""
    results = RunStorage(store).read_results()
    iterations = [r["iteration"] for r in results]
    timesteps = [r["timesteps"] for r in results]
    assert iterations == list(range(1, len(iterations) + 1)), iterations
    assert all(b > a for a, b in zip(timesteps, timesteps[1:], strict=False)), timesteps
    return results
