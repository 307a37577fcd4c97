"""What a store raises for what no retry fixes; faults.py sorts the rest."""

from __future__ import annotations


class StorageError(RuntimeError):
    """A storage problem no retry fixes (no such bucket, access denied, bad endpoint)."""


class MissingCredentials(StorageError):
    """No credentials for the store: where they come from differs in a cluster and on this machine."""


class NotFound(StorageError, KeyError):
    """The key does not exist."""
