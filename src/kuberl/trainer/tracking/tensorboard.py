"""TensorBoard event files of a run, under tensorboard/ in its storage.

The trainer writes with torch's SummaryWriter (the `tensorboard` package's format) into a local
temporary directory and uploads the event file after every result through the run's background
writer, so a slow or failing store never stops training and a failed upload is retried with the
storage backoff. A file is closed and a new one begun past `max_file_bytes`, so an upload stays
small however long the run. TensorBoard itself reads no S3: `kuberl tensorboard` copies the files
into a local directory first.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.trainer.storage.base import ObjectStore, StorageError
from kuberl.trainer.storage.stores import open_store
from kuberl.trainer.tracking.scalars import result_scalars

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import ResultLine

log = logging.getLogger(__name__)

TENSORBOARD = "tensorboard"
MAX_FILE_BYTES = 1 << 20


def event_file_key(opened_at: float, sequence: int) -> str:
    """The stored name of the `sequence`-th event file a trainer opened. TensorBoard reads a directory's
    files in name order and never goes back: the names must sort as they were written. torch's own
    names (time in seconds, then an unpadded per-process counter) do not when two files open within a
    second and the counter passes 9, so the stored name is the time and a zero-padded sequence."""
    return f"{TENSORBOARD}/events.out.tfevents.{int(opened_at):010d}.{sequence:06d}.{socket.gethostname()}"


class TensorBoardSink:
    """A result sink: one scalar per number of each result, at step = timesteps."""

    def __init__(self, store: ObjectStore, *, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.store = store
        self.max_file_bytes = max_file_bytes
        self.files_uploaded = 0
        self.bytes_uploaded = 0
        self._dir = Path(tempfile.mkdtemp(prefix="kuberl-tensorboard-"))
        self._writer: Any = None
        self._path: Path | None = None
        self._key = ""
        self._files_opened = 0
        self._uploaded_size = 0
        self._last_result: ResultLine | None = None

    def write(self, result: ResultLine) -> None:
        # The background writer calls this again after a failed upload: log each result once.
        if result is not self._last_result:
            self._add(result)
            self._last_result = result
        self._upload()
        if self._path is not None and self._uploaded_size >= self.max_file_bytes:
            self._writer.close()
            self._writer, self._path, self._uploaded_size = None, None, 0

    def _add(self, result: ResultLine) -> None:
        step = result.timesteps
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: a resumed run drops the events a previous attempt logged past its checkpoint.
            self._writer = SummaryWriter(str(self._dir), purge_step=step, max_queue=1000, flush_secs=3600)
            self._path = self._newest_file()
            self._key = event_file_key(time.time(), self._files_opened)
            self._files_opened += 1
            self._uploaded_size = 0
        walltime = time.time()
        for tag, value in result_scalars(result).items():
            self._writer.add_scalar(tag, value, step, walltime=walltime)
        self._writer.flush()

    def _newest_file(self) -> Path:
        return max(self._dir.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime_ns)

    def _upload(self) -> None:
        if self._path is None:
            return
        size = self._path.stat().st_size
        if size == self._uploaded_size:
            return
        self.store.put_file(self._key, self._path)
        self._uploaded_size = size
        self.files_uploaded += 1
        self.bytes_uploaded += size

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._upload()
        shutil.rmtree(self._dir, ignore_errors=True)


def sync_event_files(run_uri: str, local_dir: Path, *, endpoint: str | None = None) -> Path:
    """Copy a run's tensorboard/ files (local or S3) into local_dir/RUN_NAME; returns that directory."""
    store = open_store(run_uri, endpoint=endpoint)
    keys = [key for key in store.list(f"{TENSORBOARD}/") if Path(key).name.startswith("events.out.tfevents.")]
    if not keys:
        raise StorageError(f"{store.uri}: no TensorBoard event files under {TENSORBOARD}/; is this a run "
                           "trained by kuberl 0.2 or later?")
    target = local_dir / run_name(store.uri)
    target.mkdir(parents=True, exist_ok=True)
    for key in keys:
        store.get_file(key, target / Path(key).name)
    return target


def run_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1] or "run"


def tensorboard_command(logdir: Path, port: int = 6006) -> list[str]:
    return [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
            "--port", str(port)]


def printable(command: list[str]) -> str:
    return " ".join(shlex.quote(part) for part in command)


def open_tensorboard(run_uri: str, *, endpoint: str | None = None, directory: str | None = None, port: int = 6006,
                     print_only: bool = False) -> int:
    """`kuberl tensorboard`: copy the event files, then run TensorBoard on 127.0.0.1 (or print how)."""
    import subprocess

    local_dir = Path(directory or "kuberl-tensorboard").absolute()
    target = sync_event_files(run_uri, local_dir, endpoint=endpoint)
    command = tensorboard_command(local_dir, port)
    print(f"copied {len(list(target.glob('events.out.tfevents.*')))} event file(s) into {target}")
    if print_only:
        print(printable(command))
        return 0
    print(f"TensorBoard on http://127.0.0.1:{port}/ (Ctrl-C stops it)", flush=True)
    return subprocess.call(command)
