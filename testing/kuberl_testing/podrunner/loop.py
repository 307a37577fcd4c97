"""A daemon thread that runs one loop until asked to stop: the pod runner's and the node agent's."""

from __future__ import annotations

import threading
from collections.abc import Callable

JOIN_SECONDS = 30.0


class LoopThread:
    def __init__(self, target: Callable[[], None], name: str) -> None:
        self.stopping = threading.Event()  # the loop polls it
        self._thread = threading.Thread(target=target, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self._thread.is_alive():
            self._thread.join(JOIN_SECONDS)
