"""A real `mlflow server` on a free 127.0.0.1 port, with a SQLite backend and local artifacts.

    server = MLflowServer(tmp_path)
    server.start()          # waits for /health
    ... server.uri ...
    server.stop()           # SIGTERM to its process group (by PID), then SIGKILL (stop(0): SIGKILL at once)

The server's uvicorn and job-runner processes share its session, so stopping the group stops
exactly what this object started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kuberl_testing.ports import free_port

START_SECONDS = float(os.environ.get("KUBERL_MLFLOW_START_SECONDS", "240"))  # imports are slow on a busy machine


class MLflowServer:
    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server writes it while it runs
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                   "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1"]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        cwd=self.root)
        log.close()
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"mlflow server on {self.uri} not healthy after {START_SECONDS:.0f}s")

    def stop(self, grace_seconds: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `grace_seconds` (0: at once, a crash). A graceful stop waits for open
        connections: with a client still sending, it took 16 s on a busy machine."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM if grace_seconds > 0 else signal.SIGKILL)
        try:
            self.process.wait(timeout=grace_seconds if grace_seconds > 0 else 10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        # uvicorn's workers may outlive their parent by a moment: wait until the port is free again.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=1)
            except OSError:
                return
            time.sleep(0.2)
