"""The storage interface every backend implements, and the run layout built on it.

Keys are '/'-separated paths relative to the run's root (for example
"checkpoints/000120/model.pt"). A backend makes each put atomic: a reader sees
the whole old object or the whole new one, never a torn write.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


class StorageError(RuntimeError):
    """A storage problem no retry fixes (no such bucket, access denied, bad endpoint)."""


class NotFound(StorageError, KeyError):
    """The key does not exist."""


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key space under one root URI."""

    uri: str  # the root, e.g. "file:///home/me/kuberl-runs/cartpole" or "s3://bucket/prefix/ns/name"

    def put_bytes(self, key: str, data: bytes) -> None: ...
    def get_bytes(self, key: str) -> bytes: ...  # raises NotFound
    def put_file(self, key: str, path: Path) -> None: ...
    def get_file(self, key: str, path: Path) -> None: ...  # raises NotFound
    def exists(self, key: str) -> bool: ...
    def list(self, prefix: str = "") -> list[str]: ...  # keys under prefix, sorted
    def delete(self, key: str) -> None: ...  # no error when missing
    def delete_prefix(self, prefix: str) -> None: ...
    def url(self, key: str) -> str: ...  # the full URI of a key
    def check(self) -> None: ...  # raises StorageError when the store cannot be used at all


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its manifest was written and every file matches it."""

    iteration: int
    key: str  # "checkpoints/000120"
    uri: str  # the full URI of the checkpoint directory
    timesteps: int = 0
    attempt: int = 0
    files: dict[str, int] = field(default_factory=dict)  # name -> size


def open_store(uri: str, *, endpoint: str | None = None, region: str | None = None) -> ObjectStore:
    """Open the store for a root URI: file:///path, a plain path, or s3://bucket/prefix."""
    if uri.startswith("s3://"):
        from kuberl.trainer.storage.s3 import S3Store

        return S3Store(uri, endpoint=endpoint, region=region)
    from kuberl.trainer.storage.local import LocalStore

    return LocalStore(uri)


def retry_delay(failures: int, base: float = 0.5, cap: float = 10.0) -> float:
    """Seconds to wait after `failures` failures in a row: exponential with full jitter (spreads the
    retries of many writers apart), capped; any count is safe (no float overflow)."""
    return random.uniform(0.5 * min(cap, base), min(cap, base * 2 ** min(failures, 32)))
