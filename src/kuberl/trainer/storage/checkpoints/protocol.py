"""The checkpoint protocol: files, then manifest.json, then the `latest` pointer.

A checkpoint exists only once its manifest is written and every file matches
the manifest (size and sha256), so a crash at any point leaves either the
previous checkpoint or the new one, never a torn one. `latest` names the newest
complete checkpoint and carries the writer's attempt: a writer from an older
attempt (a zombie head) never moves it. `best` (with checkpoint.keepBest) names the
checkpoint with the best evaluation return; retention never deletes the one it names.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypedDict

from kuberl import __version__
from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore, SizedListing
from kuberl.trainer.storage.errors import NotFound, StorageError
from kuberl.trainer.storage.stores import open_store

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
LATEST = f"{CHECKPOINTS}/latest"
BEST = f"{CHECKPOINTS}/best"
# The checkpoint format: raised when the files a checkpoint holds change in a way older readers cannot load.
# A reader loads formats MIN_FORMAT_VERSION..FORMAT_VERSION and refuses any other (IncompatibleCheckpoint).
FORMAT_VERSION = 1
MIN_FORMAT_VERSION = 1
FILE_CONCURRENCY = 4
_DIR_RE = re.compile(r"^\d{6,}$")


class CheckpointCorrupt(StorageError):
    """A checkpoint's files do not match its manifest."""


class IncompatibleCheckpoint(StorageError):
    """A checkpoint written in a format this kuberl cannot load (a newer one, or one too old)."""


def format_of(manifest: dict[str, Any]) -> int:
    """A manifest's checkpoint format (manifests before the field existed are format 1)."""
    try:
        return int(manifest.get("format", 1))
    except (TypeError, ValueError):
        return -1


def incompatibility(manifest: dict[str, Any], uri: str) -> str | None:
    """Why this kuberl cannot load the checkpoint, naming both versions; None when it can."""
    found = format_of(manifest)
    if MIN_FORMAT_VERSION <= found <= FORMAT_VERSION:
        return None
    version = manifest.get("kuberl")
    writer = f"kuberl {version}" if isinstance(version, str) and version else "an unknown kuberl version"
    reads = (f"format {FORMAT_VERSION}" if MIN_FORMAT_VERSION == FORMAT_VERSION
             else f"formats {MIN_FORMAT_VERSION} to {FORMAT_VERSION}")
    advice = ("use that kuberl version (or newer) to load it" if found > FORMAT_VERSION
              else "load it with the kuberl version that wrote it")
    return (f"checkpoint {uri} was written by {writer} in checkpoint format {found}; kuberl {__version__} "
            f"reads {reads}: {advice}, or train afresh (kuberl train --fresh)")


class FencedError(StorageError):
    """A newer attempt owns the run: this writer must not write checkpoints any more."""


def checkpoint_key(iteration: int) -> str:
    return f"{CHECKPOINTS}/{iteration:06d}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _info(store: ObjectStore, key: str, manifest: dict[str, Any]) -> CheckpointInfo:
    return CheckpointInfo(
        iteration=int(manifest["iteration"]),
        key=key,
        uri=store.url(key),
        timesteps=int(manifest.get("timesteps", 0)),
        attempt=int(manifest.get("attempt", 0)),
        files={name: int(meta["size"]) for name, meta in manifest["files"].items()},
    )


def _read_manifest(store: ObjectStore, key: str) -> dict[str, Any] | None:
    """The parsed manifest of a checkpoint directory, or None when missing or unreadable."""
    try:
        manifest = json.loads(store.get_bytes(f"{key}/{MANIFEST}"))
        int(manifest["iteration"])
        for meta in manifest["files"].values():
            int(meta["size"]), str(meta["sha256"])
        return manifest
    except NotFound:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("checkpoint %s: unreadable manifest, skipped", store.url(key))
        return None


def _sizes(store: ObjectStore, prefix: str) -> dict[str, int] | None:
    return store.sizes(prefix) if isinstance(store, SizedListing) else None


def _matches_listing(manifest: dict[str, Any], key: str, listing: dict[str, int] | set[str]) -> bool:
    for name, meta in manifest["files"].items():
        path = f"{key}/{name}"
        if path not in listing:
            return False
        if isinstance(listing, dict) and listing[path] != int(meta["size"]):
            return False
    return True


def _checkpoint_dirs(keys: list[str]) -> list[str]:
    dirs = {"/".join(k.split("/")[:2]) for k in keys if k.count("/") >= 2}
    return sorted(d for d in dirs if _DIR_RE.match(d.split("/")[1]))


def list_checkpoints(store: ObjectStore) -> list[CheckpointInfo]:
    """Complete checkpoints (manifest present, every file present with its size), oldest first."""
    sizes = _sizes(store, f"{CHECKPOINTS}/")
    listing: dict[str, int] | set[str] = sizes if sizes is not None else set(store.list(f"{CHECKPOINTS}/"))
    found = []
    for key in _checkpoint_dirs(list(listing)):
        if f"{key}/{MANIFEST}" not in listing:
            continue
        manifest = _read_manifest(store, key)
        if manifest is not None and _matches_listing(manifest, key, listing):
            found.append(_info(store, key, manifest))
    return sorted(found, key=lambda c: c.iteration)


@dataclass(frozen=True)
class LatestPointer:
    """`checkpoints/latest`: the newest complete checkpoint as its writer saw it, and that writer's attempt."""

    checkpoint: str  # the directory name, "000120"
    attempt: int = 0
    iteration: int = -1


def read_latest_pointer(store: ObjectStore) -> LatestPointer | None:
    """`checkpoints/latest`, or None when missing or unreadable (then no attempt owns the run yet)."""
    try:
        pointer = json.loads(store.get_bytes(LATEST))
        return LatestPointer(str(pointer["checkpoint"]), int(pointer.get("attempt", 0)),
                             int(pointer.get("iteration", -1)))
    except NotFound:
        return None
    except (ValueError, KeyError, TypeError):
        log.warning("%s: unreadable `latest` pointer, ignored", store.url(LATEST))
        return None


def _complete(store: ObjectStore, key: str) -> CheckpointInfo | None:
    manifest = _read_manifest(store, key)
    if manifest is None:
        return None
    sizes = _sizes(store, f"{key}/")
    listing = set(store.list(f"{key}/")) if sizes is None else sizes
    return _info(store, key, manifest) if _matches_listing(manifest, key, listing) else None


def _newest_first(checkpoints: list[CheckpointInfo]) -> list[CheckpointInfo]:
    return sorted(checkpoints, key=lambda c: (c.attempt, c.iteration), reverse=True)


def latest_checkpoint(store: ObjectStore) -> CheckpointInfo | None:
    """The newest complete checkpoint: the highest attempt, then the highest iteration.

    `latest` is written after a checkpoint's manifest, so it can lag: a head killed between
    the two leaves a complete checkpoint that the pointer does not name yet. Resuming from
    the pointer would then throw away that training; the manifests are the truth.
    """
    complete = list_checkpoints(store)
    return _newest_first(complete)[0] if complete else None


def read_checkpoint(store: ObjectStore, info: CheckpointInfo) -> dict[str, bytes]:
    """Every file of a checkpoint, verified against its manifest (raises CheckpointCorrupt, and
    IncompatibleCheckpoint for a format this kuberl cannot load)."""
    manifest = _read_manifest(store, info.key)
    if manifest is None:
        raise CheckpointCorrupt(f"checkpoint {info.uri}: no readable manifest")
    problem = incompatibility(manifest, info.uri)
    if problem is not None:
        raise IncompatibleCheckpoint(problem)
    files: dict[str, bytes] = {}
    for name, meta in manifest["files"].items():
        try:
            data = store.get_bytes(f"{info.key}/{name}")
        except NotFound as e:
            raise CheckpointCorrupt(f"checkpoint {info.uri}: {name} is missing") from e
        if len(data) != int(meta["size"]) or _sha256(data) != meta["sha256"]:
            raise CheckpointCorrupt(f"checkpoint {info.uri}: {name} does not match its manifest")
        files[name] = data
    return files


def restore_latest(store: ObjectStore) -> tuple[dict[str, bytes], CheckpointInfo] | None:
    """The newest checkpoint that verifies, falling back to older ones while newer ones do not."""
    for info in _newest_first(list_checkpoints(store)):
        try:
            return read_checkpoint(store, info), info
        except CheckpointCorrupt as e:
            log.warning("%s; trying an older checkpoint", e)
    return None


def _split_checkpoint_uri(uri: str) -> tuple[str, str | None]:
    """(run root URI, checkpoint dir name or None) for a run root or a checkpoints/N URI."""
    trimmed = uri.rstrip("/")
    head, _, last = trimmed.rpartition("/")
    if _DIR_RE.match(last) and head.endswith(f"/{CHECKPOINTS}"):
        return head[: -len(CHECKPOINTS) - 1], last
    if last == CHECKPOINTS:
        return head, None
    return trimmed, None


def load_checkpoint(uri: str, endpoint: str | None = None,
                    region: str | None = None) -> tuple[dict[str, bytes], CheckpointInfo]:
    """Files of the checkpoint at `uri`: a checkpoint directory, or a run root (newest that verifies); an s3://
    one read through `endpoint` in `region` (spec.storage's)."""
    root, name = _split_checkpoint_uri(uri)
    store = open_store(root, endpoint=endpoint, region=region)
    if name is not None:
        info = _complete(store, f"{CHECKPOINTS}/{name}")
        if info is None:
            raise StorageError(f"checkpoint {uri}: not a complete checkpoint (no manifest or missing files)")
        return read_checkpoint(store, info), info
    found = restore_latest(store)
    if found is None:
        raise StorageError(f"{uri}: no complete checkpoint found")
    return found


def _fence(store: ObjectStore, attempt: int, iteration: int) -> None:
    pointer = read_latest_pointer(store)
    if pointer is not None and pointer.attempt > attempt:
        raise FencedError(
            f"{store.url(LATEST)} belongs to attempt {pointer.attempt}; attempt {attempt} "
            f"stops writing checkpoints (iteration {iteration} not written)"
        )


def _put_files(store: ObjectStore, key: str, files: dict[str, bytes]) -> dict[str, str]:
    """Put every file (a few at once: S3 latency, not bandwidth, dominates small files); their sha256."""

    def put(item: tuple[str, bytes]) -> tuple[str, str]:
        name, data = item
        store.put_bytes(f"{key}/{name}", data)
        return name, _sha256(data)

    if len(files) == 1:
        return dict([put(next(iter(files.items())))])
    with ThreadPoolExecutor(max_workers=min(FILE_CONCURRENCY, len(files))) as pool:
        return dict(pool.map(put, files.items()))


def write_checkpoint(
    store: ObjectStore,
    iteration: int,
    files: dict[str, bytes],
    *,
    timesteps: int,
    attempt: int = 0,
    before_manifest: Callable[[], object] | None = None,
) -> CheckpointInfo:
    """Write files, then the manifest, then `latest` (unless a newer attempt or checkpoint holds it).

    `before_manifest` runs after the files and before the manifest; returning False or raising
    fails the write. Pass RunStorage.flush so results.jsonl holds every line up to this
    iteration before the checkpoint exists: a resume then leaves no gap in the results.
    """
    if not files:
        raise ValueError("a checkpoint needs at least one file")
    for name in files:
        if not name or name == MANIFEST or name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"invalid checkpoint file name {name!r}")
    key = checkpoint_key(iteration)
    _fence(store, attempt, iteration)
    # A leftover manifest from a crashed write of the same iteration must go first,
    # or the directory would look complete while its files are being replaced.
    store.delete(f"{key}/{MANIFEST}")
    digests = _put_files(store, key, files)
    manifest = {
        "format": FORMAT_VERSION,
        "kuberl": __version__,
        "iteration": iteration,
        "timesteps": int(timesteps),
        "attempt": int(attempt),
        "createdAt": time.time(),
        "files": {name: {"size": len(data), "sha256": digests[name]} for name, data in files.items()},
    }
    if before_manifest is not None and before_manifest() is False:
        raise StorageError(f"checkpoint {store.url(key)}: not committed, before_manifest did not complete")
    _fence(store, attempt, iteration)
    store.put_bytes(f"{key}/{MANIFEST}", json.dumps(manifest, indent=1).encode())
    info = _info(store, key, manifest)
    _move_latest(store, info)
    return info


def _move_latest(store: ObjectStore, info: CheckpointInfo) -> None:
    pointer = read_latest_pointer(store)
    if pointer is not None:
        if pointer.attempt > info.attempt:
            raise FencedError(f"{store.url(LATEST)} belongs to attempt {pointer.attempt}; "
                              f"checkpoint {info.uri} of attempt {info.attempt} is not made latest")
        same_attempt_newer = pointer.attempt == info.attempt and pointer.iteration > info.iteration
        if same_attempt_newer and _complete(store, f"{CHECKPOINTS}/{pointer.checkpoint}") is not None:
            return
    body = {"checkpoint": info.key.rsplit("/", 1)[1], "iteration": info.iteration,
            "timesteps": info.timesteps, "attempt": info.attempt}
    store.put_bytes(LATEST, json.dumps(body).encode())


class BestPointer(TypedDict):
    """`checkpoints/best`: the checkpoint of the best evaluation so far, and its return mean."""

    checkpoint: str  # the directory name, "000120"
    iteration: int
    timesteps: int
    attempt: int
    evaluationReturnMean: float  # noqa: N815 - the file's names


def read_best_pointer(store: ObjectStore) -> BestPointer | None:
    """`checkpoints/best`, or None when missing or unreadable."""
    try:
        pointer = json.loads(store.get_bytes(BEST))
        return {"checkpoint": str(pointer["checkpoint"]), "iteration": int(pointer["iteration"]),
                "timesteps": int(pointer.get("timesteps", 0)), "attempt": int(pointer.get("attempt", 0)),
                "evaluationReturnMean": float(pointer["evaluationReturnMean"])}
    except NotFound:
        return None
    except (ValueError, KeyError, TypeError):
        log.warning("%s: unreadable `best` pointer, ignored", store.url(BEST))
        return None


def write_best(store: ObjectStore, iteration: int, files: dict[str, bytes], *, timesteps: int, score: float,
               attempt: int = 0, before_manifest: Callable[[], object] | None = None) -> CheckpointInfo:
    """Point `best` at the checkpoint of `iteration` (writing it first from `files` when retention
    deleted it or it was never written); `latest` only moves forward, so an older one leaves it be."""
    info = _complete(store, checkpoint_key(iteration))
    if info is None:
        info = write_checkpoint(store, iteration, files, timesteps=timesteps, attempt=attempt,
                                before_manifest=before_manifest)
    _fence(store, attempt, iteration)
    body: BestPointer = {"checkpoint": info.key.rsplit("/", 1)[1], "iteration": info.iteration,
                         "timesteps": info.timesteps, "attempt": attempt, "evaluationReturnMean": score}
    store.put_bytes(BEST, json.dumps(body).encode())
    return info


def apply_retention(store: ObjectStore, keep: int) -> list[str]:
    """Delete complete checkpoints beyond the newest `keep`, and partial ones older than the newest complete.

    Partial checkpoints newer than the newest complete one may be in progress and stay.
    The ones `latest` and `best` name always stay. Returns the deleted checkpoint keys.
    """
    if keep < 1:
        raise ValueError("keep must be >= 1")
    complete = list_checkpoints(store)
    if not complete:
        return []
    protected = {c.key for c in complete[-keep:]}
    latest, best = read_latest_pointer(store), read_best_pointer(store)
    if latest is not None:
        protected.add(f"{CHECKPOINTS}/{latest.checkpoint}")
    if best is not None:
        protected.add(f"{CHECKPOINTS}/{best['checkpoint']}")
    newest = complete[-1].iteration
    complete_keys = {c.key for c in complete}
    doomed = []
    for key in _checkpoint_dirs(store.list(f"{CHECKPOINTS}/")):
        if key in protected:
            continue
        iteration = int(key.rsplit("/", 1)[1])
        if key in complete_keys or iteration < newest:
            doomed.append(key)
    for key in doomed:
        # Manifest first: an interrupted delete leaves a partial checkpoint, never a broken "complete" one.
        store.delete(f"{key}/{MANIFEST}")
        store.delete_prefix(f"{key}/")
    return doomed
