"""Observation filters: running mean/std normalisation, like RLlib's MeanStdFilter.

Each rollout worker updates its own copy while sampling and keeps the
statistics gathered since the last sync apart (the delta). Every iteration the
learner merges the workers' deltas into its master copy and sends the master
back, so all workers normalise alike and the learner can save it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np

CLIP = 10.0


@dataclass
class RunningStats:
    """Count, mean and sum of squared deviations (Chan et al.'s parallel algorithm)."""

    shape: tuple[int, ...]
    count: float = 0.0
    mean: np.ndarray = field(default=None)  # type: ignore[assignment,arg-type]  # __post_init__ fills it
    m2: np.ndarray = field(default=None)  # type: ignore[assignment,arg-type]

    def __post_init__(self) -> None:
        if self.mean is None:
            self.mean = np.zeros(self.shape, dtype=np.float64)
        if self.m2 is None:
            self.m2 = np.zeros(self.shape, dtype=np.float64)

    def push_batch(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, dtype=np.float64).reshape((-1, *self.shape))
        if len(batch) == 0:
            return
        self.merge(RunningStats(self.shape, float(len(batch)), batch.mean(axis=0), batch.var(axis=0) * len(batch)))

    def merge(self, other: RunningStats) -> None:
        if other.count == 0:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.count / total)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / total)
        self.count = total

    @property
    def std(self) -> np.ndarray:
        if self.count < 2:
            return np.ones(self.shape, dtype=np.float64)
        return np.sqrt(self.m2 / self.count)

    def copy(self) -> RunningStats:
        return RunningStats(self.shape, self.count, self.mean.copy(), self.m2.copy())


class ObservationFilter:
    """The identity: observations pass unchanged (observation_filter: none)."""

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        return obs

    def take_delta(self) -> RunningStats | None:
        return None

    def apply_delta(self, delta: RunningStats | None) -> None:
        pass

    def get_state(self) -> RunningStats | None:
        return None

    def set_state(self, state: RunningStats | None) -> None:
        pass


class MeanStdFilter(ObservationFilter):
    def __init__(self, shape: tuple[int, ...], clip: float = CLIP):
        self.stats = RunningStats(shape)
        self.delta = RunningStats(shape)
        self.clip = clip

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        if update:
            self.stats.push_batch(obs)
            self.delta.push_batch(obs)
        normalised = (obs - self.stats.mean) / (self.stats.std + 1e-8)
        return np.clip(normalised, -self.clip, self.clip).astype(np.float32)

    def take_delta(self) -> RunningStats:
        """The statistics gathered since the last call (a worker sends these to the learner)."""
        delta, self.delta = self.delta, RunningStats(self.stats.shape)
        return delta

    def apply_delta(self, delta: RunningStats | None) -> None:
        """Merge a worker's delta into this (master) filter."""
        if delta is not None:
            self.stats.merge(delta)

    def get_state(self) -> RunningStats:
        return self.stats.copy()

    def set_state(self, state: RunningStats | None) -> None:
        if state is not None:
            self.stats = state.copy()


def make_filter(kind: str, shape: tuple[int, ...]) -> ObservationFilter:
    if kind == "mean_std":
        return MeanStdFilter(shape)
    if kind == "none":
        return ObservationFilter()
    raise ValueError(f"unknown observation filter {kind!r}")


def stats_to_bytes(stats: RunningStats | None) -> bytes:
    buffer = io.BytesIO()
    if stats is not None:
        np.savez(buffer, count=np.array(stats.count), mean=stats.mean, m2=stats.m2)
    return buffer.getvalue()


def stats_from_bytes(data: bytes) -> RunningStats | None:
    if not data:
        return None
    with np.load(io.BytesIO(data)) as arrays:
        mean = arrays["mean"]
        return RunningStats(tuple(mean.shape), float(arrays["count"]), mean, arrays["m2"])
