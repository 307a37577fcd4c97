"""Measuring a run: quantiles of samples, Prometheus histograms read from text, a process's memory."""

from __future__ import annotations

import contextlib
import math
import re
import statistics
import threading
from pathlib import Path


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of values, inclusive method; None for no values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def histogram_quantile(text: str, metric: str, q: float) -> float | str | None:
    """The upper bound of the bucket holding the q-quantile of a Prometheus histogram (text format);
    beyond the largest bound, ">BOUND" (JSON has no infinity)."""
    buckets = []
    for match in re.finditer(rf'^{metric}_bucket{{le="([^"]+)"}} ([0-9.e+]+)$', text, re.MULTILINE):
        buckets.append((float(match[1]), float(match[2])))
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    bound = next(le for le, count in buckets if count >= q * total)
    return bound if math.isfinite(bound) else f">{buckets[-2][0]:g}"


def histogram_count(text: str, metric: str) -> int:
    match = re.search(rf"^{metric}_count ([0-9.e+]+)$", text, re.MULTILINE)
    return int(float(match[1])) if match else 0


def _proc_status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


def rss_mb(pid: int) -> float:
    """The resident memory of a process now, in MB (from /proc)."""
    return _proc_status_mb(pid, "VmRSS")


def peak_rss_mb(pid: int) -> float:
    """The most resident memory the process has had, in MB (the kernel's high-water mark)."""
    return _proc_status_mb(pid, "VmHWM")


class RssSampler:
    """The RSS of one process every `interval` seconds, in a thread: peak and last."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, RuntimeError):
                self.samples.append(rss_mb(self.pid))
            self._stop.wait(self.interval)

    def now(self) -> float:
        return round(rss_mb(self.pid), 1)

    @property
    def peak(self) -> float:
        return round(max(self.samples, default=0.0), 1)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
