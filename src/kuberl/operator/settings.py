"""Operator settings from the environment: read once at start-up, then passed around as a value."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kuberl.api.contract import DEFAULT_STATUS_PORT, ENV_STATUS_PORT
from kuberl.api.types import CPU_PATTERN, MEMORY_PATTERN

DEFAULT_TRAINER_IMAGE = "ghcr.io/kuberl/kuberl-trainer:0.1.0"


class SettingsError(ValueError):
    """An operator setting that cannot work; the message names the environment variable."""


@dataclass(frozen=True)
class Settings:
    trainer_image: str = DEFAULT_TRAINER_IMAGE
    watch_namespaces: tuple[str, ...] = ()  # empty: all namespaces
    default_head_cpu: str = "2"
    default_head_memory: str = "4Gi"
    default_worker_cpu: str = "4"
    default_worker_memory: str = "8Gi"
    status_poll_seconds: float = 10.0
    status_port: int = DEFAULT_STATUS_PORT  # the head's trainer, its Service, probe and NetworkPolicy follow it
    operator_namespace: str = "kuberl-system"
    prometheus_namespace: str = "monitoring"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        base = cls()

        def text(key: str, default: str) -> str:
            return env.get(key, "").strip() or default

        def quantity(key: str, default: str, pattern: str) -> str:
            value = text(key, default)
            if not re.match(pattern, value):
                raise SettingsError(f"{key}={value!r} is not a Kubernetes quantity")
            return value

        def number(key: str, default: float, minimum: float) -> float:
            raw = text(key, str(default))
            try:
                value = float(raw)
            except ValueError:
                raise SettingsError(f"{key}={raw!r} is not a number") from None
            if value < minimum:
                raise SettingsError(f"{key}={raw!r} must be >= {minimum}")
            return value

        def port(key: str, default: int) -> int:
            raw = text(key, str(default))
            if not raw.isdigit() or not 1 <= int(raw) <= 65535:
                raise SettingsError(f"{key}={raw!r} is not a port (1-65535)")
            return int(raw)

        namespaces = tuple(ns.strip() for ns in env.get("KUBERL_WATCH_NAMESPACES", "").split(",") if ns.strip())
        return cls(
            trainer_image=text("KUBERL_TRAINER_IMAGE", base.trainer_image),
            watch_namespaces=namespaces,
            default_head_cpu=quantity("KUBERL_DEFAULT_HEAD_CPU", base.default_head_cpu, CPU_PATTERN),
            default_head_memory=quantity("KUBERL_DEFAULT_HEAD_MEMORY", base.default_head_memory, MEMORY_PATTERN),
            default_worker_cpu=quantity("KUBERL_DEFAULT_WORKER_CPU", base.default_worker_cpu, CPU_PATTERN),
            default_worker_memory=quantity("KUBERL_DEFAULT_WORKER_MEMORY", base.default_worker_memory,
                                           MEMORY_PATTERN),
            status_poll_seconds=number("KUBERL_STATUS_POLL_SECONDS", base.status_poll_seconds, 0.1),
            status_port=port(ENV_STATUS_PORT, base.status_port),
            operator_namespace=text("KUBERL_OPERATOR_NAMESPACE", text("POD_NAMESPACE", base.operator_namespace)),
            prometheus_namespace=text("KUBERL_PROMETHEUS_NAMESPACE", base.prometheus_namespace),
        )
