"""The storage interface every backend implements, and the optional features some have.

Keys are '/'-separated paths relative to the run's root (for example
"checkpoints/000120/model.pt"). A backend makes each put atomic: a reader sees
the whole old object or the whole new one, never a torn write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from kuberl.trainer.storage.errors import NotFound, StorageError

__all__ = ["AppendableStore", "CheckpointInfo", "NotFound", "ObjectStore", "SizedListing", "StorageError"]


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


@runtime_checkable
class AppendableStore(Protocol):
    """A store that appends to an object in place (a local disk; S3 cannot)."""

    def append_bytes(self, key: str, data: bytes) -> None:
        """Append `data`; a failed write (a full disk) raises StorageError and leaves the object as it was."""


@runtime_checkable
class SizedListing(Protocol):
    """A store that lists keys with their sizes in one call (checkpoints are verified by size)."""

    def sizes(self, prefix: str = "") -> dict[str, int]: ...  # key -> bytes, sorted by key


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its manifest was written and every file matches it."""

    iteration: int
    key: str  # "checkpoints/000120"
    uri: str  # the full URI of the checkpoint directory
    timesteps: int = 0
    attempt: int = 0
    files: dict[str, int] = field(default_factory=dict)  # name -> size


