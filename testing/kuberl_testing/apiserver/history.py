"""The resourceVersion counter and the log of changes that WATCH replays and streams."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

MAX_EVENTS_KEPT = 20_000


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    group: str
    plural: str
    type: str
    obj: dict[str, Any]


class EventLog:
    """Every write is one event with the next resourceVersion; watchers wait on `next_change()`."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.resource_version = 0
        self._tick: asyncio.Event | None = None
        self.closed = False  # serving has stopped: watches end instead of waiting for their timeoutSeconds

    def publish(self, group: str, plural: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Stamp a new resourceVersion on `obj` (never mutated afterwards) and wake the watchers."""
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self.events.append(WatchEvent(self.resource_version, group, plural, kind, obj))
        if len(self.events) > 2 * MAX_EVENTS_KEPT:
            del self.events[: len(self.events) - MAX_EVENTS_KEPT]
        if self._tick is not None:
            self._tick.set()
        self._tick = asyncio.Event()
        return obj

    def close(self) -> None:
        """End every watch: a watcher whose client has gone notices only when it writes, and a server's
        shutdown waits for its open handlers."""
        self.closed = True
        if self._tick is not None:
            self._tick.set()

    def next_change(self) -> asyncio.Event:
        """An event set by the next publish (take it before reading `after()`, so no change slips by)."""
        if self._tick is None:
            self._tick = asyncio.Event()
        return self._tick

    def after(self, rv: int) -> list[WatchEvent]:
        """The events newer than resourceVersion `rv`."""
        if not self.events or rv >= self.events[-1].rv:
            return []
        start = max(0, rv - self.events[0].rv + 1)
        return self.events[start:]

    def oldest_replayable(self) -> int | None:
        """The oldest resourceVersion a watch can start from (None: nothing trimmed yet, any will do)."""
        return self.events[0].rv - 1 if self.events else None
