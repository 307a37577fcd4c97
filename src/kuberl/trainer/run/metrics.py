"""Trainer metrics in Prometheus form, served on the status port's /metrics next to /status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram

from kuberl.trainer.run.observer import RunObserver

if TYPE_CHECKING:
    from kuberl.trainer.storage.base import CheckpointInfo

ENV_STEPS = Counter("kuberl_env_steps", "Environment steps sampled")
EPISODES = Counter("kuberl_episodes", "Episodes finished")
LEARNER_UPDATES = Counter("kuberl_learner_updates", "Gradient updates applied by the learner")
ITERATION = Gauge("kuberl_training_iteration", "Last completed training iteration")
EPISODE_RETURN = Gauge("kuberl_episode_return_mean", "Mean return of the last 100 finished episodes")
ENV_STEPS_PER_SECOND = Gauge("kuberl_env_steps_per_second", "Sampling throughput of the last iteration")
EVALUATIONS = Counter("kuberl_evaluations", "Evaluations finished")
EVALUATION_RETURN = Gauge("kuberl_evaluation_return_mean", "Return mean of the latest evaluation's episodes")
EVALUATION_ITERATION = Gauge("kuberl_evaluation_iteration", "Training iteration whose policy the latest evaluation played")
REPLAY_SIZE = Gauge("kuberl_replay_size", "Transitions held per replay shard ('local': the learner's own buffer)",
                    ["shard"])
REPLAY_CAPACITY = Gauge("kuberl_replay_capacity", "Transitions a replay shard holds when full", ["shard"])
POLICY_LAG_MEAN = Gauge("kuberl_policy_lag_mean",
                        "Mean policy lag of the last iteration's train batches, in policy versions (IMPALA, APPO)")
POLICY_LAG_MAX = Gauge("kuberl_policy_lag_max", "Largest policy lag of the last iteration, in policy versions")
LAST_CHECKPOINT = Gauge("kuberl_last_checkpoint_timestamp_seconds",
                        "Unix time the last complete checkpoint was written (0: none yet)")
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
        _advance(LEARNER_UPDATES, "updatesTotal", learner.get("updatesTotal"))
        if isinstance(learner.get("policyLagMean"), int | float):
            POLICY_LAG_MEAN.set(learner["policyLagMean"])
            POLICY_LAG_MAX.set(learner.get("policyLagMax") or 0)
    ITERATION.set(result.get("iteration", 0))
    if isinstance(result.get("episodeReturnMean"), int | float):
        EPISODE_RETURN.set(result["episodeReturnMean"])
    ENV_STEPS_PER_SECOND.set(result.get("envStepsPerSecond", 0.0) or 0.0)
    replay = result.get("replay")
    if isinstance(replay, dict):
        # Sharded replay reports one entry per shard; a learner's own buffer reports its stats flat.
        shards = {"local": replay} if isinstance(replay.get("size"), int | float) else replay
        for shard, stats in shards.items():
            if isinstance(stats, dict) and isinstance(stats.get("size"), int | float):
                REPLAY_SIZE.labels(shard=shard).set(stats["size"])
                if isinstance(stats.get("capacity"), int | float):
                    REPLAY_CAPACITY.labels(shard=shard).set(stats["capacity"])


def observe_evaluation(evaluation: dict[str, Any]) -> None:
    EVALUATIONS.inc()
    EVALUATION_ITERATION.set(evaluation.get("iteration", 0))
    if isinstance(evaluation.get("returnMean"), int | float):
        EVALUATION_RETURN.set(evaluation["returnMean"])


class MetricsObserver(RunObserver):
    """Puts each result, evaluation and checkpoint's duration into the metrics."""

    def on_iteration_end(self, result: dict[str, Any], *, stopping: bool) -> None:
        observe_result(result)

    def on_evaluation(self, evaluation: dict[str, Any]) -> None:
        observe_evaluation(evaluation)

    def on_checkpoint_written(self, info: CheckpointInfo, seconds: float) -> None:
        CHECKPOINT_SECONDS.observe(seconds)
        LAST_CHECKPOINT.set_to_current_time()
