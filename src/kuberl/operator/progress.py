"""Read the trainer's progress from the head pod's /status (addressed by pod IP: no cluster DNS)."""

from __future__ import annotations

import json
from typing import cast

import aiohttp

from kuberl.api.contract import STATUS_PATH, TrainerStatus

STATUS_TIMEOUT_SECONDS = 3.0


def status_url(pod_ip: str, port: int) -> str:
    host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
    return f"http://{host}:{port}{STATUS_PATH}"


async def fetch_trainer_status(session: aiohttp.ClientSession, pod_ip: str, port: int,
                               timeout: float = STATUS_TIMEOUT_SECONDS) -> TrainerStatus | None:
    """The trainer's /status JSON, or None while it is not serving (starting, restarting, gone)."""
    try:
        async with session.get(status_url(pod_ip, port), timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                return None
            body = json.loads(await resp.text())
    except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
        return None
    return cast(TrainerStatus, body) if isinstance(body, dict) else None
