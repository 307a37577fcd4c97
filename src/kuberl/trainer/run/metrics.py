"""Trainer metrics in Prometheus form, served on the status port's /metrics next to /status."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

ENV_STEPS = Counter("kuberl_env_steps", "Environment steps sampled")
EPISODES = Counter("kuberl_episodes", "Episodes finished")
LEARNER_UPDATES = Counter("kuberl_learner_updates", "Gradient updates applied by the learner")
ITERATION = Gauge("kuberl_training_iteration", "Last completed training iteration")
EPISODE_RETURN = Gauge("kuberl_episode_return_mean", "Mean return of the last 100 finished episodes")
ENV_STEPS_PER_SECOND = Gauge("kuberl_env_steps_per_second", "Sampling throughput of the last iteration")
EVALUATIONS = Counter("kuberl_evaluations", "Evaluations finished")
EVALUATION_RETURN = Gauge("kuberl_evaluation_return_mean", "Return mean of the latest evaluation's episodes")
EVALUATION_ITERATION = Gauge("kuberl_evaluation_iteration", "Training iteration whose policy the latest evaluation played")
REPLAY_SIZE = Gauge("kuberl_replay_size", "Transitions held per replay shard", ["shard"])
CHECKPOINT_SECONDS = Histogram(
    "kuberl_checkpoint_duration_seconds", "Time to write one complete checkpoint",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)

_last: dict[str, float] = {}


def _advance(counter: Counter, key: str, total: Any) -> None:
    """Counters from cumulative totals: add what grew since the last result (a resume restarts the count)."""
    if not isinstance(total, int | float):
        return
    previous = _last.get(key)
    if previous is not None and total >= previous:
        counter.inc(total - previous)
    elif previous is None:
        counter.inc(total)
    _last[key] = total


def observe_result(result: dict[str, Any]) -> None:
    _advance(ENV_STEPS, "timesteps", result.get("timesteps"))
    _advance(EPISODES, "episodes", result.get("episodes"))
    learner = result.get("learner")
    if isinstance(learner, dict):
        _advance(LEARNER_UPDATES, "updates", learner.get("updates"))
    ITERATION.set(result.get("iteration", 0))
    if isinstance(result.get("episodeReturnMean"), int | float):
        EPISODE_RETURN.set(result["episodeReturnMean"])
    ENV_STEPS_PER_SECOND.set(result.get("envStepsPerSecond", 0.0) or 0.0)
    replay = result.get("replay")
    if isinstance(replay, dict):
        for shard, stats in replay.items():
            if isinstance(stats, dict) and isinstance(stats.get("size"), int | float):
                REPLAY_SIZE.labels(shard=shard).set(stats["size"])


def observe_evaluation(evaluation: dict[str, Any]) -> None:
    EVALUATIONS.inc()
    EVALUATION_ITERATION.set(evaluation.get("iteration", 0))
    if isinstance(evaluation.get("returnMean"), int | float):
        EVALUATION_RETURN.set(evaluation["returnMean"])
