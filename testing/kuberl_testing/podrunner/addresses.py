"""Loopback addresses for the stand-in's pods (each pod has its own, as in a cluster)."""

from __future__ import annotations

import random


class AddressPool:
    """Loopback addresses 127.0.X.2..254 for pods; a released address is reused last."""

    def __init__(self, third_octet: int | None = None):
        octet = third_octet if third_octet is not None else random.randint(20, 239)
        if not 1 <= octet <= 254:
            raise ValueError(f"third octet must be 1..254, not {octet}")
        self._free = [f"127.0.{octet}.{n}" for n in range(2, 255)]

    def acquire(self) -> str:
        if not self._free:
            raise RuntimeError("no loopback address left for another pod")
        return self._free.pop(0)

    def release(self, ip: str) -> None:
        if ip not in self._free:
            self._free.append(ip)


