"""The operator's Prometheus metrics: reconciles by result, reconcile duration, experiments by phase."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kuberl.api.types import Phase

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter("kuberl_operator_reconciles", "Reconcile passes by result", ["result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram(
    "kuberl_operator_reconcile_duration_seconds", "Duration of one reconcile of an experiment",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=REGISTRY,
)
EXPERIMENTS = Gauge("kuberl_operator_experiments", "RLExperiments by phase", ["phase"], registry=REGISTRY)


def publish_phases(phases: dict[tuple[str, str], Phase]) -> None:
    """Set the experiments-by-phase gauge from the operator's view {(namespace, name): phase}."""
    counts = Tally(phases.values())
    for phase in Phase:
        EXPERIMENTS.labels(phase=phase.value).set(counts.get(phase, 0))
