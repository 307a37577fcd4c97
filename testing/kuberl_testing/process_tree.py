"""Start a pod's process in its own session and stop everything it started, and nothing else.

`ray start --head` leaves daemons (GCS, raylet, ...) behind when it returns. They keep the process
group of the session the pod's process opened, and they inherit its environment, so a pod is
stopped by signalling its process group and, for anything that left the group, every process
whose environment carries the pod's unique marker. Never by process name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

MARKER_VARIABLE = "KUBERL_STANDIN_POD"


def start_process(argv: list[str], env: Mapping[str, str], cwd: str | Path, log_path: str | Path) -> subprocess.Popen:
    """Run `argv` in a new session (its own process group), stdout and stderr to `log_path`."""
    with open(log_path, "ab", buffering=0) as log:
        return subprocess.Popen(argv, env=dict(env), cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def processes_with_marker(marker: str, proc_root: str = "/proc") -> list[int]:
    """PIDs whose initial environment has MARKER_VARIABLE=marker."""
    wanted = f"{MARKER_VARIABLE}={marker}".encode()
    found = []
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "environ"), "rb") as f:
                if wanted in f.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours to read
    return found


def _signal_all(pgid: int | None, pids: list[int], sig: int) -> None:
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_process_tree(process: subprocess.Popen, marker: str, *, grace_seconds: float = 0.0) -> None:
    """SIGTERM the main process, wait up to `grace_seconds` for it, then SIGKILL the whole pod.

    With no grace (the main process already ended, as when a container's first process exits)
    everything left is killed at once.
    """
    pgid = process.pid
    if grace_seconds > 0 and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_seconds)
    deadline = time.monotonic() + 10.0
    signalled: set[int] = set()
    while True:
        marked = processes_with_marker(marker)
        signalled.update(marked)
        _signal_all(pgid, marked, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.2)
        # zombies have an empty environ, so they do not count as alive
        if not processes_with_marker(marker) or time.monotonic() > deadline:
            break
    # A killed process drops its memory, environ included, before it becomes a zombie: wait for
    # that last step too, so that whoever called this finds nothing of the pod still running.
    while any(still_running(pid) for pid in signalled) and time.monotonic() < deadline:
        time.sleep(0.02)


def still_running(pid: int, proc_root: str = "/proc") -> bool:
    """Whether `pid` exists and has not yet exited (a zombie, or one being reaped, has)."""
    try:
        with open(os.path.join(proc_root, str(pid), "status")) as f:
            states = [line for line in f if line.startswith("State:")]
    except OSError:
        return False
    return bool(states) and states[0].split()[1] not in ("Z", "X")


def stop_gracefully(process: subprocess.Popen, timeout: float = 30.0) -> int:
    """SIGTERM, as the kubelet sends it; the exit code once the process has exited (or raises
    subprocess.TimeoutExpired past `timeout`, leaving the process for reap())."""
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout)


def reap(process: subprocess.Popen) -> None:
    """Kill the process if it still runs (for a `finally:`), and wait for it."""
    if process.poll() is None:
        process.kill()
        process.wait(10)
