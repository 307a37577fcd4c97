"""Where a run's files live: local directories or S3, behind one small interface."""

from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
from kuberl.trainer.storage.errors import NotFound, StorageError
from kuberl.trainer.storage.stores import open_store

__all__ = ["CheckpointInfo", "NotFound", "ObjectStore", "StorageError", "open_store"]
