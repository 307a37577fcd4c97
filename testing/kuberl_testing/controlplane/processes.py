"""Start each component in a session of its own and stop exactly what was started.

A started process is recorded by PID and by its start time in /proc, so a later `stop` (perhaps
from another process, as the CLI's) never signals a PID the kernel has given to someone else.
Stopping signals the component's own process group, which the new session created.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kuberl_testing.process_tree import start_process


def _proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), or None if there is no such
    process or it is a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces
    return None if fields[0] == "Z" else fields[19]


@dataclass(frozen=True)
class Started:
    """One component's process: what `stop` needs, and what the CLI's state file holds."""

    name: str
    pid: int
    start_time: str
    log: str

    def alive(self) -> bool:
        return _proc_start_time(self.pid) == self.start_time

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def launch(name: str, argv: list[str], env: Mapping[str, str], cwd: Path, log: Path) -> tuple[Started, subprocess.Popen]:
    process = start_process(argv, env, cwd, log)
    start_time = _proc_start_time(process.pid)
    if start_time is None:  # it ended at once: keep a record that is never alive
        start_time = "exited"
    return Started(name, process.pid, start_time, str(log)), process


def stop(started: Started, process: subprocess.Popen | None = None, grace_seconds: float = 10.0) -> None:
    """SIGTERM the component's process group, SIGKILL it after `grace_seconds`."""
    for sig, wait_seconds in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        if not started.alive():
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(started.pid, sig)  # the session's group id is the leader's pid
        deadline = time.monotonic() + wait_seconds
        while started.alive() and time.monotonic() < deadline:
            if process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(0.1)
            else:
                time.sleep(0.1)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(1.0)  # reap it


def rss_bytes(started: Started) -> int | None:
    """Resident memory of the component's process, or None once it has ended."""
    if not started.alive():
        return None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{started.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def log_tail(started: Started, lines: int = 30) -> str:
    try:
        text = Path(started.log).read_text(errors="replace")
    except OSError:
        return f"({started.log} unreadable)"
    return "\n".join(text.splitlines()[-lines:])
