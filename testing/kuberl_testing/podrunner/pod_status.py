"""The Pod `.status` documents the stand-in kubelet writes: waiting, running and terminated."""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

MAX_TERMINATION_MESSAGE = 4096
LOG_FALLBACK_BYTES = 2048


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def termination_message(termination_path: Path | None, log_path: Path | None, exit_code: int, policy: str) -> str:
    """The container's termination message: its termination log, or with FallbackToLogsOnError
    and a failure, the tail of its log."""
    message = ""
    if termination_path is not None and termination_path.exists():
        message = termination_path.read_bytes()[:MAX_TERMINATION_MESSAGE].decode(errors="replace")
    if not message.strip() and exit_code != 0 and policy == "FallbackToLogsOnError" and log_path is not None:
        with open(log_path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_FALLBACK_BYTES))
            message = log.read().decode(errors="replace")
    return message


def _conditions(ready: bool) -> list[dict[str, Any]]:
    stamp = now()
    flag = "True" if ready else "False"
    return [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
            {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": stamp},
            {"type": "Ready", "status": flag, "lastTransitionTime": stamp}]


def _container_status(name: str, state: dict[str, Any], *, ready: bool) -> dict[str, Any]:
    return {"name": name, "ready": ready, "started": ready, "restartCount": 0, "image": "", "imageID": "",
            "state": state}


def waiting_status(container: str, reason: str, message: str) -> dict[str, Any]:
    return {"phase": "Pending", "hostIP": "127.0.0.1", "conditions": _conditions(False),
            "containerStatuses": [_container_status(container, {"waiting": {"reason": reason, "message": message}},
                                                    ready=False)]}


def running_status(container: str, pid: int, ip: str | None, started_at: str | None) -> dict[str, Any]:
    status = _container_status(container, {"running": {"startedAt": started_at}}, ready=True)
    status["containerID"] = f"standin://{pid}"
    return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
            "startTime": started_at, "conditions": _conditions(True), "containerStatuses": [status]}


def terminated_status(container: str, exit_code: int, reason: str, message: str, *, started_at: str | None,
                      ip: str | None) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "reason": reason, "message": message,
                  "startedAt": started_at or now(), "finishedAt": now()}
    status = _container_status(container, {"terminated": terminated}, ready=False)
    return {"phase": "Succeeded" if exit_code == 0 else "Failed", "conditions": _conditions(False),
            "containerStatuses": [status], **({"podIP": ip, "podIPs": [{"ip": ip}]} if ip else {})}
