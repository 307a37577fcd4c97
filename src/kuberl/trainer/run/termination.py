"""SIGTERM and SIGINT ask the run to stop after the current iteration, with a final checkpoint; a
second signal stops it at once."""

from __future__ import annotations

import signal
import threading
from typing import Any


class Termination:
    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal_name = ""
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested.is_set():  # a second signal: stop now
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        self.requested.set()

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
