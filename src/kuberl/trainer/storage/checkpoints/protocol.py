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
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kuberl.trainer.storage.base import (
    CheckpointInfo,
    NotFound,
    ObjectStore,
    StorageError,
    open_store,
    retry_delay,
)

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
LATEST = f"{CHECKPOINTS}/latest"
BEST = f"{CHECKPOINTS}/best"
FORMAT_VERSION = 1
FILE_CONCURRENCY = 4
_DIR_RE = re.compile(r"^\d{6,}$")


class CheckpointCorrupt(StorageError):
    """A checkpoint's files do not match its manifest."""


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
    sizes = getattr(store, "sizes", None)
    return sizes(prefix) if callable(sizes) else None


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


def _read_latest_pointer(store: ObjectStore) -> dict[str, Any] | None:
    try:
        pointer = json.loads(store.get_bytes(LATEST))
        return {"checkpoint": str(pointer["checkpoint"]), "attempt": int(pointer.get("attempt", 0)),
                "iteration": int(pointer.get("iteration", -1))}
    except NotFound:
        return None
    except (ValueError, KeyError, TypeError):
        log.warning("%s: unreadable `latest` pointer, ignored", store.url(LATEST))
        return None


def _complete(store: ObjectStore, key: str) -> CheckpointInfo | None:
    manifest = _read_manifest(store, key)
    if manifest is None:
        return None
    listing = _sizes(store, f"{key}/")
    if listing is None:
        listing = set(store.list(f"{key}/"))
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
    """Every file of a checkpoint, verified against its manifest (raises CheckpointCorrupt)."""
    manifest = _read_manifest(store, info.key)
    if manifest is None:
        raise CheckpointCorrupt(f"checkpoint {info.uri}: no readable manifest")
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


def load_checkpoint(uri: str, endpoint: str | None = None) -> tuple[dict[str, bytes], CheckpointInfo]:
    """Files of the checkpoint at `uri`: a checkpoint directory, or a run root (newest that verifies)."""
    root, name = _split_checkpoint_uri(uri)
    store = open_store(root, endpoint=endpoint)
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
    pointer = _read_latest_pointer(store)
    if pointer is not None and pointer["attempt"] > attempt:
        raise FencedError(
            f"{store.url(LATEST)} belongs to attempt {pointer['attempt']}; attempt {attempt} "
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
    pointer = _read_latest_pointer(store)
    if pointer is not None:
        if pointer["attempt"] > info.attempt:
            raise FencedError(f"{store.url(LATEST)} belongs to attempt {pointer['attempt']}; "
                              f"checkpoint {info.uri} of attempt {info.attempt} is not made latest")
        same_attempt_newer = pointer["attempt"] == info.attempt and pointer["iteration"] > info.iteration
        if same_attempt_newer and _complete(store, f"{CHECKPOINTS}/{pointer['checkpoint']}") is not None:
            return
    body = {"checkpoint": info.key.rsplit("/", 1)[1], "iteration": info.iteration,
            "timesteps": info.timesteps, "attempt": info.attempt}
    store.put_bytes(LATEST, json.dumps(body).encode())


def read_best_pointer(store: ObjectStore) -> dict[str, Any] | None:
    """`checkpoints/best`: {checkpoint, iteration, timesteps, attempt, evaluationReturnMean}, or None."""
    try:
        pointer = json.loads(store.get_bytes(BEST))
        return {**pointer, "checkpoint": str(pointer["checkpoint"]), "iteration": int(pointer["iteration"]),
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
    body = {"checkpoint": info.key.rsplit("/", 1)[1], "iteration": info.iteration, "timesteps": info.timesteps,
            "attempt": attempt, "evaluationReturnMean": score}
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
    pointer = _read_latest_pointer(store)
    protected = {c.key for c in complete[-keep:]}
    best = read_best_pointer(store)
    for named in (pointer, best):
        if named is not None:
            protected.add(f"{CHECKPOINTS}/{named['checkpoint']}")
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


class CheckpointWriter:
    """Writes checkpoints in a background thread so training never waits on the store.

    One write at a time; a submit while a write is running replaces any pending one
    (the newest state wins). Failed writes are retried with backoff until they succeed,
    a newer checkpoint is submitted, or the writer is closed. `before_commit` (for example
    RunStorage.flush) runs before each manifest; see write_checkpoint.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        keep: int,
        attempt: int = 0,
        on_written: Callable[[CheckpointInfo], None] | None = None,
        before_commit: Callable[[], object] | None = None,
        max_backoff_seconds: float = 10.0,
    ) -> None:
        self.store = store
        self.before_commit = before_commit
        self.keep = keep
        self.attempt = attempt
        self.on_written = on_written
        self.max_backoff_seconds = max_backoff_seconds
        self.last: CheckpointInfo | None = None
        self.last_error: Exception | None = None
        self.last_duration_seconds: float | None = None
        self.fenced = False
        self.failures = 0
        self._pending: tuple[int, dict[str, bytes], int] | None = None
        self._best: tuple[int, dict[str, bytes], int, float] | None = None  # newest best waiting to be marked
        self.best: CheckpointInfo | None = None
        self._in_flight: int | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kuberl-checkpoint-writer", daemon=True)
        self._thread.start()

    def submit(self, iteration: int, files: dict[str, bytes], timesteps: int) -> bool:
        """Queue a checkpoint; returns False when it is already written, in flight, or fenced off."""
        with self._cond:
            if self._closed or self.fenced:
                return False
            if (self.last is not None and self.last.iteration >= iteration) or self._in_flight == iteration:
                return False
            if self._pending is not None and self._pending[0] > iteration:
                return False
            self._pending = (iteration, files, timesteps)
            self._cond.notify_all()
            return True

    def submit_best(self, iteration: int, files: dict[str, bytes], timesteps: int, score: float) -> bool:
        """Point `checkpoints/best` at iteration's checkpoint (written from `files` if it is not there);
        a newer best submitted before this one is done replaces it."""
        with self._cond:
            if self._closed or self.fenced:
                return False
            self._best = (iteration, files, timesteps, score)
            self._cond.notify_all()
            return True

    def _waiting(self) -> bool:
        return self._pending is not None or self._best is not None or self._in_flight is not None

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._waiting()

    def wait(self, timeout: float | None = None) -> CheckpointInfo | None:
        """Wait until nothing is pending or in flight (or the timeout); returns the last written."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._waiting() and not self.fenced:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self.last

    def close(self, timeout: float | None = 60.0) -> CheckpointInfo | None:
        """Finish the pending write (up to `timeout`: a dead store must not hang the exit), then stop."""
        last = self.wait(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        return last

    def _next(self) -> tuple[str, tuple] | None:
        with self._cond:
            while self._pending is None and self._best is None and not self._closed:
                self._cond.wait()
            if self._pending is not None:
                job, self._pending = self._pending, None
                self._in_flight = job[0]
                return "checkpoint", job
            if self._best is not None:
                best, self._best = self._best, None
                self._in_flight = best[0]
                return "best", best
            return None

    def _write(self, kind: str, job: tuple) -> CheckpointInfo:
        if kind == "best":
            iteration, files, timesteps, score = job
            return write_best(self.store, iteration, files, timesteps=timesteps, score=score, attempt=self.attempt,
                              before_manifest=self.before_commit)
        iteration, files, timesteps = job
        return write_checkpoint(self.store, iteration, files, timesteps=timesteps, attempt=self.attempt,
                                before_manifest=self.before_commit)

    def _run(self) -> None:
        failures = 0  # in a row, across checkpoints: a newer checkpoint does not reset the backoff
        while (next_job := self._next()) is not None:
            kind, job = next_job
            iteration = job[0]
            while True:
                started = time.monotonic()
                try:
                    info = self._write(kind, job)
                except FencedError as e:
                    log.error("%s", e)
                    with self._cond:
                        self.fenced, self.last_error = True, e
                        self._pending, self._best, self._in_flight = None, None, None
                        self._cond.notify_all()
                    return
                except Exception as e:  # noqa: BLE001 - any store failure is retried
                    failures += 1
                    self.failures += 1
                    self.last_error = e
                    log.warning("checkpoint %d: write failed (%s); retry %d", iteration, e, failures)
                    if self._wait_before_retry(failures, kind):
                        break  # a newer checkpoint replaces this one, or the writer closed
                    continue
                failures = 0
                if kind == "best":
                    self.best = info
                    self._retain()
                else:
                    self.last_duration_seconds = time.monotonic() - started
                    self._finish(info)
                break
            with self._cond:
                self._in_flight = None
                self._cond.notify_all()

    def _wait_before_retry(self, failures: int, kind: str = "checkpoint") -> bool:
        """Sleep the backoff (a submit does not cut it short: the store is still failing; a close does);
        True when this write should be given up for a newer pending one, or because the writer closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed, timeout=retry_delay(failures, cap=self.max_backoff_seconds))
            newer = self._best if kind == "best" else self._pending
            return newer is not None or self._closed

    def _retain(self) -> None:
        try:
            apply_retention(self.store, self.keep)
        except Exception as e:  # noqa: BLE001 - retention is retried after the next checkpoint
            log.warning("checkpoint retention failed: %s", e)

    def _finish(self, info: CheckpointInfo) -> None:
        self._retain()
        with self._cond:
            self.last = info
            self.last_error = None
        if self.on_written is not None:
            try:
                self.on_written(info)
            except Exception:  # noqa: BLE001 - a callback must not kill the writer
                log.exception("checkpoint on_written callback failed")
