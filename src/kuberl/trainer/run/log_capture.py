"""A tee of the process's stdout and stderr into the run's storage (kuberl.trainer.storage.logs).

The file descriptors 1 and 2 are swapped for pipes, and a thread per pipe copies what arrives to the
console it replaced (the pod's log stays as it was) and to the log chunks. At the descriptor level,
not sys.stdout: what Ray forwards from its workers, C++ logs, tracebacks and faulthandler's stack
dumps all go there too. The copy to the chunks only appends to memory; the store is written by a
BackgroundWriter's thread.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from kuberl.trainer.storage.logs import LogChunks

if TYPE_CHECKING:
    from kuberl.trainer.run.settings import TrainerSettings

DRAIN_SECONDS = 2.0  # after the descriptors are restored: how long the threads may read what is left
MAX_PENDING_BYTES = 65536  # a line longer than this (a progress bar redrawn with \r) goes on in pieces


class WholeLines:
    """Passes on whole lines only, keeping a partial one until its newline (or `flush`): stdout and stderr
    share the chunks, and `print` writes a line's text and its newline apart, so without this a line of one
    stream could be cut in two by a line of the other."""

    def __init__(self, sink: Callable[[bytes], None], max_pending: int = MAX_PENDING_BYTES) -> None:
        self.sink = sink
        self.max_pending = max_pending
        self.pending = b""

    def write(self, data: bytes) -> None:
        self.pending += data
        cut = self.pending.rfind(b"\n") + 1
        if not cut and len(self.pending) < self.max_pending:
            return
        whole, self.pending = (self.pending[:cut], self.pending[cut:]) if cut else (self.pending, b"")
        self.sink(whole)

    def flush(self) -> None:
        if self.pending:
            pending, self.pending = self.pending, b""
            self.sink(pending)


def _pump(read_fd: int, console_fd: int, sink: Callable[[bytes], None]) -> None:
    lines = WholeLines(sink)
    try:
        while data := os.read(read_fd, 65536):
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(console_fd, view):]
                except OSError:  # the console is gone: the chunks still get the output
                    break
            with contextlib.suppress(Exception):
                lines.write(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(Exception):
            lines.flush()  # the pipe's end: a last line without its newline
        with contextlib.suppress(OSError):
            os.close(read_fd)


class OutputCapture:
    """`capture = OutputCapture(chunks).start()` ... `capture.stop()`; stop restores the descriptors."""

    def __init__(self, chunks: LogChunks, fds: tuple[int, ...] = (1, 2)) -> None:
        self.chunks = chunks
        self.fds = fds
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []

    def start(self) -> OutputCapture:
        _flush_python_streams()
        for fd in self.fds:
            saved = os.dup(fd)  # first: a descriptor that is not open fails here, before anything changed
            read_fd, write_fd = os.pipe()
            os.dup2(write_fd, fd)
            os.close(write_fd)
            self._saved[fd] = saved
            thread = threading.Thread(target=_pump, args=(read_fd, saved, self.chunks.write),
                                      name=f"kuberl-tee-{fd}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> bool:
        """Put the console back, then write the chunks (up to `timeout`); False when some output was
        not written. A child process still holding a pipe keeps its thread reading (it is a daemon)."""
        if not self._saved:
            return True
        _flush_python_streams()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # the pipe's last write end closes: its thread reads to the end
        for thread, saved in zip(self._threads, self._saved.values(), strict=True):
            thread.join(DRAIN_SECONDS)
            if not thread.is_alive():  # a thread still reading keeps its console (a reused number would mislead it)
                with contextlib.suppress(OSError):
                    os.close(saved)
        self._saved.clear()
        self._threads.clear()
        return self.chunks.close(timeout)


def _flush_python_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def start_capture(settings: TrainerSettings) -> OutputCapture | None:
    """The tee the settings ask for (in a cluster by default), started; None when they ask for none."""
    if not settings.log_chunks:
        return None
    capture = OutputCapture(LogChunks(chunk_bytes=settings.log_chunk_bytes, keep=settings.log_keep_chunks))
    try:
        return capture.start()
    except OSError as exc:  # no descriptor 1 or 2 to swap (a daemon): train without the copy
        capture.stop(timeout=0)
        print(f"warning: the trainer's output is not copied to storage: {exc}", file=sys.stderr)
        return None
