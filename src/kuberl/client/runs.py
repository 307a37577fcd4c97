"""A run's files, read from where the trainer wrote them (docs/storage.md), with the user's own
credentials: results.jsonl, checkpoints and the trainer's output (logs/).

The run's root is `spec.storage.uri/NAMESPACE/NAME`. The endpoint is the caller's (--endpoint) or
else `spec.storage.endpoint`: an in-cluster endpoint may not be reachable from a laptop. Credentials
come from the usual AWS chain (AWS_ACCESS_KEY_ID, a profile, ...), never from the cluster's Secret.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.api.field_errors import fail

if TYPE_CHECKING:
    from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
    from kuberl.trainer.storage.logs import StoredLog


def run_uri(experiment: dict[str, Any], storage_uri: str | None = None) -> str:
    """The run's root for an experiment object (or for its name and namespace with `storage_uri`)."""
    from kuberl.trainer.storage.run import run_root_uri

    meta, spec = experiment.get("metadata") or {}, experiment.get("spec") or {}
    base = storage_uri or (spec.get("storage") or {}).get("uri")
    if not base:
        raise fail("spec.storage.uri", f"experiment {meta.get('name')!r} names no storage")
    return run_root_uri(base, meta.get("namespace") or "default", meta["name"])


def open_run(uri: str, *, endpoint: str | None = None, region: str | None = None) -> ObjectStore:
    """The store of a run root (s3://..., file://... or a directory)."""
    from kuberl.trainer.storage import open_store

    return open_store(uri, endpoint=endpoint, region=region)


def read_results(store: ObjectStore) -> list[dict[str, Any]]:
    """results.jsonl, one dict per line; [] before the first iteration."""
    from kuberl.trainer.storage.errors import NotFound
    from kuberl.trainer.storage.jsonl import parse_jsonl
    from kuberl.trainer.storage.results import RESULTS

    try:
        return parse_jsonl(store.get_bytes(RESULTS))
    except NotFound:
        return []


def list_checkpoints(store: ObjectStore) -> list[CheckpointInfo]:
    """The complete checkpoints, oldest first."""
    from kuberl.trainer.storage.checkpoints import list_checkpoints as listed

    return sorted(listed(store), key=lambda c: (c.attempt, c.iteration))


def download_checkpoint(store: ObjectStore, directory: str | Path, iteration: int | None = None) -> Path:
    """Copy a checkpoint (the newest complete one by default), verified against its manifest, to
    `directory`/checkpoints/NNNNNN, manifest and all: `directory` is then a run root that `kuberl evaluate`,
    `kuberl export` and `Algorithm.restore` read. Returns the checkpoint's directory."""
    from kuberl.trainer.storage.checkpoints import MANIFEST, latest_checkpoint, read_checkpoint

    if iteration is None:
        info = latest_checkpoint(store)
    else:
        info = next((c for c in reversed(list_checkpoints(store)) if c.iteration == iteration), None)
    if info is None:
        which = "no complete checkpoint" if iteration is None else f"no complete checkpoint of iteration {iteration}"
        raise fail("checkpoint", f"{store.uri} has {which}")
    files = read_checkpoint(store, info)
    files[MANIFEST] = store.get_bytes(f"{info.key}/{MANIFEST}")
    target = Path(directory).joinpath(*info.key.split("/"))
    for name, data in files.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(data)
    return target


def stored_log(store: ObjectStore, attempt: int | None = None) -> StoredLog | None:
    from kuberl.trainer.storage.logs import read_log

    return read_log(store, attempt)
