"""Trainer metrics in Prometheus form, served on the status port's /metrics next to /status.

`TrainerMetrics` is the run's observer and a prometheus_client custom collector: it keeps the latest
figures of the run (the last result, evaluation and checkpoint) and `collect()` turns them into metric
families at each scrape. Counters come straight from the result's cumulative totals (`timesteps`,
`episodes`, `learner.updatesTotal`), which a resume carries on. The driver gives each run a registry
of its own (`metrics_registry`): the run's collector beside prometheus_client's process, platform and
GC collectors, so nothing of a run lives in module globals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, GCCollector, Histogram, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kuberl.trainer.run.observer import RunObserver

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import EvaluationResult, IterationResult
    from kuberl.trainer.storage.base import CheckpointInfo

Figure = Callable[["IterationResult"], "float | int | None"]

# name (counters without their _total), help, and the figure of a result
COUNTERS: tuple[tuple[str, str, Figure], ...] = (
    ("kuberl_env_steps", "Environment steps sampled", lambda r: r.timesteps),
    ("kuberl_episodes", "Episodes finished", lambda r: r.episodes),
    ("kuberl_learner_updates", "Gradient updates applied by the learner",
     lambda r: r.learner.updates_total if r.learner is not None else None),
)
GAUGES: tuple[tuple[str, str, Figure], ...] = (
    ("kuberl_training_iteration", "Last completed training iteration", lambda r: r.iteration),
    ("kuberl_episode_return_mean", "Mean return of the last 100 finished episodes", lambda r: r.episode_return_mean),
    ("kuberl_env_steps_per_second", "Sampling throughput of the last iteration", lambda r: r.env_steps_per_second),
    ("kuberl_policy_lag_mean",
     "Mean policy lag of the last iteration's train batches, in policy versions (IMPALA, APPO)",
     lambda r: r.learner.policy_lag_mean if r.learner is not None else None),
    ("kuberl_policy_lag_max", "Largest policy lag of the last iteration, in policy versions",
     lambda r: r.learner.policy_lag_max if r.learner is not None else None),
)
CHECKPOINT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def _replay_stats(result: IterationResult) -> dict[str, dict[str, float]]:
    """Per shard (a learner's own buffer is shard_0): size and capacity."""
    if result.replay is None:
        return {}
    return {shard: {k: float(value) for k in ("size", "capacity")
                    if isinstance(value := stats.get(k), int | float) and not isinstance(value, bool)}
            for shard, stats in result.replay.shards.items() if isinstance(stats.get("size"), int | float)}


class TrainerMetrics(RunObserver, Collector):
    """The run's figures as the observer sees them; `collect()` makes the metric families from them.

    A figure a result leaves out keeps its last value (the return mean before the first episode ends,
    the policy lag of algorithms without one, the replay of an iteration that did not report it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures: dict[str, float] = {}
        self._replay: dict[str, dict[str, float]] = {}
        self._evaluations = 0
        self._evaluation: dict[str, float] = {}
        self._last_checkpoint = 0.0
        self._checkpoint_seconds = Histogram(
            "kuberl_checkpoint_duration_seconds", "Time to write one complete checkpoint",
            buckets=CHECKPOINT_BUCKETS, registry=None)

    def on_iteration_end(self, result: IterationResult, *, stopping: bool) -> None:
        figures = {name: float(value) for name, _, figure in (*COUNTERS, *GAUGES)
                   if (value := figure(result)) is not None}
        replay = _replay_stats(result)
        with self._lock:
            self._figures.update(figures)
            for shard, stats in replay.items():
                self._replay.setdefault(shard, {}).update(stats)

    def on_evaluation(self, evaluation: EvaluationResult) -> None:
        with self._lock:
            self._evaluations += 1
            self._evaluation["iteration"] = float(evaluation.iteration)
            if evaluation.return_mean is not None:
                self._evaluation["returnMean"] = float(evaluation.return_mean)

    def on_checkpoint_written(self, info: CheckpointInfo, seconds: float) -> None:
        self._checkpoint_seconds.observe(seconds)
        with self._lock:
            self._last_checkpoint = time.time()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            figures, replay = dict(self._figures), {k: dict(v) for k, v in self._replay.items()}
            evaluations, evaluation, last_checkpoint = self._evaluations, dict(self._evaluation), self._last_checkpoint
        for name, documentation, _ in COUNTERS:
            yield CounterMetricFamily(name, documentation, value=figures.get(name, 0.0))
        for name, documentation, _ in GAUGES:
            yield GaugeMetricFamily(name, documentation, value=figures.get(name, 0.0))
        yield CounterMetricFamily("kuberl_evaluations", "Evaluations finished", value=evaluations)
        yield GaugeMetricFamily("kuberl_evaluation_return_mean", "Return mean of the latest evaluation's episodes",
                                value=evaluation.get("returnMean", 0.0))
        yield GaugeMetricFamily("kuberl_evaluation_iteration",
                                "Training iteration whose policy the latest evaluation played",
                                value=evaluation.get("iteration", 0.0))
        size = GaugeMetricFamily("kuberl_replay_size",
                                 "Transitions held per replay shard (shard_0: a learner's own buffer)", labels=["shard"])
        capacity = GaugeMetricFamily("kuberl_replay_capacity", "Transitions a replay shard holds when full",
                                     labels=["shard"])
        for shard, stats in sorted(replay.items()):
            size.add_metric([shard], stats["size"])
            if "capacity" in stats:
                capacity.add_metric([shard], stats["capacity"])
        yield size
        yield capacity
        yield GaugeMetricFamily("kuberl_last_checkpoint_timestamp_seconds",
                                "Unix time the last complete checkpoint was written (0: none yet)", value=last_checkpoint)
        yield from self._checkpoint_seconds.collect()


def metrics_registry(metrics: TrainerMetrics) -> CollectorRegistry:
    """What the status server's /metrics serves: the run's metrics and the process's (CPU, memory, GC)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(metrics)
    return registry
