"""Which store a root URI names: a local directory or an S3 prefix (each an ObjectStore, base.py)."""

from __future__ import annotations

from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.s3 import S3Store


def open_store(uri: str, *, endpoint: str | None = None, region: str | None = None) -> LocalStore | S3Store:
    """Open the store for a root URI: file:///path, a plain path, or s3://bucket/prefix."""
    if uri.startswith("s3://"):
        return S3Store(uri, endpoint=endpoint, region=region)
    return LocalStore(uri)
