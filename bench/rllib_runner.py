"""Run an RLlib script with .venv-rllib's python, as a subprocess that cannot outlive its deadline.

The script prints JSON lines on stdout; they come back parsed. It runs in its own session, so
the watchdog stops RLlib's Ray processes with it, and nothing else on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ScriptRun:
    lines: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    stopped: bool = False  # killed by the watchdog at the deadline
    stderr: str = ""

    def error(self, what: str) -> str:
        return f"{what} stopped at the deadline" if self.stopped else f"{what} exited {self.returncode}: {self.stderr}"


def run_script(python: Path, script: str, args: list[str], deadline_seconds: float) -> ScriptRun:
    with tempfile.NamedTemporaryFile("w", suffix="_rllib.py", delete=False) as file:
        file.write(script)
    run = ScriptRun()
    try:
        with tempfile.TemporaryFile("w+") as stderr_file:
            proc = subprocess.Popen([str(python), file.name, *args], stdout=subprocess.PIPE, stderr=stderr_file,
                                    text=True, cwd=tempfile.gettempdir(), start_new_session=True)
            watchdog = threading.Timer(deadline_seconds, lambda: os.killpg(proc.pid, signal.SIGKILL))
            watchdog.start()
            try:
                assert proc.stdout is not None
                run.lines = [json.loads(line) for line in proc.stdout if line.startswith("{")]
                run.returncode = proc.wait()
            finally:
                run.stopped = not watchdog.is_alive()
                watchdog.cancel()
            stderr_file.seek(0)
            run.stderr = stderr_file.read()[-2000:].strip()
    finally:
        Path(file.name).unlink(missing_ok=True)
    return run
