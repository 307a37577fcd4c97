"""The trainer's settings from the environment: read once when `kuberl train` starts, then passed
around as a value (as kuberl.operator.settings does for the operator).

The operator sets most of them on the head pod (kuberl.api.contract). The status port and the
number of nodes to wait for are head-only: they are read only for a run in a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from kuberl.api.contract import (
    DEFAULT_STATUS_PORT,
    ENV_ATTEMPT,
    ENV_EXPECTED_NODES,
    ENV_EXPERIMENT_NAMESPACE,
    ENV_STATUS_HOST,
    ENV_STATUS_PORT,
    ENV_TERMINATION_LOG,
    TERMINATION_LOG,
)

NODE_WAIT_SECONDS = "KUBERL_NODE_WAIT_SECONDS"
FINAL_CHECKPOINT_SECONDS = "KUBERL_FINAL_CHECKPOINT_SECONDS"
LOG_CHUNKS = "KUBERL_LOG_CHUNKS"  # 1/0: the trainer's output into the run's storage (default: in a cluster)
LOG_CHUNK_BYTES = "KUBERL_LOG_CHUNK_BYTES"
LOG_KEEP_CHUNKS = "KUBERL_LOG_KEEP_CHUNKS"


class SettingsError(ValueError):
    """A trainer setting that cannot be read; the message names the environment variable."""


@dataclass(frozen=True)
class TrainerSettings:
    attempt: int | None = None  # None: the run's storage counts the attempts (a local run)
    namespace: str | None = None  # the experiment's namespace, as the operator sets it
    expected_nodes: int | None = None  # Ray nodes to wait for; None: 1 + spec.workers.replicas
    status_port: int = DEFAULT_STATUS_PORT  # in a cluster, unless --status-port says otherwise
    status_host: str | None = None  # None: every address in a cluster, loopback locally
    termination_log: str = TERMINATION_LOG
    node_wait_seconds: float = 300.0
    final_checkpoint_seconds: float = 600.0
    log_chunks: bool = False  # the trainer's stdout/stderr into logs/ of the run's storage (storage/logs.py)
    log_chunk_bytes: int = 1 << 20
    log_keep_chunks: int = 16

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, in_cluster: bool = False) -> TrainerSettings:
        env = os.environ if env is None else env
        base = cls()

        def number(key: str, default: float, kind: type[int] | type[float]) -> float:
            raw = env.get(key)
            if raw is None:
                return default
            try:
                return kind(raw)
            except ValueError:
                raise SettingsError(f"{key}={raw!r} is not {'an integer' if kind is int else 'a number'}") from None

        attempt = None
        if ENV_ATTEMPT in env:  # set, even empty (attempt 0): the storage does not count attempts
            attempt = int(number(ENV_ATTEMPT, 0, int)) if env[ENV_ATTEMPT] else 0
        expected_nodes, status_port = None, base.status_port
        if in_cluster:
            expected_nodes = int(number(ENV_EXPECTED_NODES, 0, int)) if ENV_EXPECTED_NODES in env else None
            status_port = int(number(ENV_STATUS_PORT, base.status_port, int))
        return cls(
            attempt=attempt,
            namespace=env.get(ENV_EXPERIMENT_NAMESPACE) or None,
            expected_nodes=expected_nodes,
            status_port=status_port,
            status_host=env.get(ENV_STATUS_HOST),
            termination_log=env.get(ENV_TERMINATION_LOG, base.termination_log),
            node_wait_seconds=number(NODE_WAIT_SECONDS, base.node_wait_seconds, float),
            final_checkpoint_seconds=number(FINAL_CHECKPOINT_SECONDS, base.final_checkpoint_seconds, float),
            log_chunks=env.get(LOG_CHUNKS, "1" if in_cluster else "0").strip().lower() not in ("0", "false", "no", ""),
            log_chunk_bytes=max(2, int(number(LOG_CHUNK_BYTES, base.log_chunk_bytes, int))),
            log_keep_chunks=max(1, int(number(LOG_KEEP_CHUNKS, base.log_keep_chunks, int))),
        )
