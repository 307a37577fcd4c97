"""Serving the emulator on loopback: from async code (`serve_emulator`) or from sync code (`EmulatorThread`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import kmock

from kuberl_testing.apiserver.emulator import KubeApiEmulator


def _default_emulator(with_kuberl_crd: bool) -> KubeApiEmulator:
    emulator = KubeApiEmulator()
    if with_kuberl_crd:
        from kuberl.api.crd import build_crd
        from kuberl.api.sweep_crd import build_sweep_crd

        emulator.register_crd(build_crd())
        emulator.register_crd(build_sweep_crd())
    return emulator


@contextlib.asynccontextmanager
async def serve_emulator(port: int = 0, *, with_kuberl_crd: bool = True,
                         host: str = "127.0.0.1") -> AsyncIterator[tuple[KubeApiEmulator, str]]:
    """Serve a fresh emulator on loopback; yields (emulator, base URL)."""
    emulator = _default_emulator(with_kuberl_crd)
    async with emulator, kmock.Server(emulator, host=host, port=port or None) as server:
        try:
            yield emulator, str(server.url).rstrip("/")
        finally:
            emulator.end_watches()


class EmulatorThread:
    """The emulator on its own event loop in a background thread, for synchronous tests and tools."""

    def __init__(self, port: int = 0, *, with_kuberl_crd: bool = True):
        self._port, self._with_crd = port, with_kuberl_crd
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.emulator: KubeApiEmulator | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="kube-api-emulator", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            async with serve_emulator(self._port, with_kuberl_crd=self._with_crd) as (emulator, url):
                self.emulator, self.url, self.loop = emulator, url, asyncio.get_running_loop()
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    def start(self) -> EmulatorThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None or not self.url:
            raise RuntimeError(f"the API emulator did not start: {self._error!r}")
        return self

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a sync function on the emulator's loop (its store is not thread-safe) and return its result."""
        assert self.loop is not None

        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def __enter__(self) -> EmulatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
