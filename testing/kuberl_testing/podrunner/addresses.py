"""Loopback addresses for the stand-in's pods (each pod has its own, as in a cluster)."""

from __future__ import annotations

import fcntl
import random
import tempfile
from pathlib import Path
from typing import IO

OCTETS = range(20, 240)  # the third octets a runner picks from when none is given
CLAIMS = Path(tempfile.gettempdir()) / "kuberl-pod-addresses"


class AddressPool:
    """Loopback addresses 127.0.X.2..254 for pods; a released address is reused last.

    Without a given X, the pool claims one that no other pool on this machine holds until `close()` (or its
    process's end): two pod runners side by side (the stand-in's and the control plane's e2e suites) that drew
    the same X would give their first pods the same address."""

    def __init__(self, third_octet: int | None = None):
        self._claim: IO[str] | None = None
        if third_octet is None:
            third_octet, self._claim = _claim_octet()
        elif not 1 <= third_octet <= 254:
            raise ValueError(f"third octet must be 1..254, not {third_octet}")
        self.third_octet = third_octet
        self._free = [f"127.0.{third_octet}.{n}" for n in range(2, 255)]

    def acquire(self) -> str:
        if not self._free:
            raise RuntimeError("no loopback address left for another pod")
        return self._free.pop(0)

    def release(self, ip: str) -> None:
        if ip not in self._free:
            self._free.append(ip)

    def close(self) -> None:
        """Give the claimed third octet back."""
        if self._claim is not None:
            self._claim.close()
            self._claim = None


def _claim_octet() -> tuple[int, IO[str]]:
    """A random third octet of OCTETS that no other pool holds, held by an exclusive lock on its file."""
    CLAIMS.mkdir(exist_ok=True)
    for octet in random.sample(OCTETS, len(OCTETS)):
        handle = open(CLAIMS / f"{octet}.lock", "w")  # noqa: SIM115 - held open: the lock lasts as long as it
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return octet, handle
    raise RuntimeError(f"every third octet {OCTETS.start}..{OCTETS.stop - 1} is held by another pod runner")
