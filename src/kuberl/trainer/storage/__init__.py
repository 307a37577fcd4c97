"""Where a run's files live: local directories or S3, behind one small interface."""

from kuberl.trainer.storage.base import (
    CheckpointInfo,
    NotFound,
    ObjectStore,
    StorageError,
    open_store,
)

__all__ = ["CheckpointInfo", "NotFound", "ObjectStore", "StorageError", "open_store"]
