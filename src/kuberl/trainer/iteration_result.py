"""One training iteration's result, typed, and its line in results.jsonl.

An algorithm's `training_step` reports a `StepResult`; `Algorithm.train_iteration` makes it an
`IterationResult`; the training run and its observers (results.jsonl and the sinks, the live status,
the metrics, the progress line, evaluation, the trackers) pass it on. Its camelCase JSON, as
results.jsonl holds it and `Algorithm.train()` returns it, is written and read here only
(`to_json`, `from_json`, `line_from_json`), key for key and in the order the file has always had.

Algorithm-specific figures stay by name in flat mappings (`Stats`: a learner's losses, a replay
shard's size, a worker's steps), in the order the algorithm reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    from kuberl.trainer.run.task_defaults import DefaultsRecord

Scalar: TypeAlias = float | int | str | bool | None
Stats: TypeAlias = Mapping[str, Scalar]
JsonValue: TypeAlias = Scalar | list["JsonValue"] | Mapping[str, "JsonValue"]
JsonObject: TypeAlias = Mapping[str, JsonValue]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class LearnerStats:
    """`learner`: the learner's losses and figures by name (policyLoss, valueLoss, loss, criticLoss, lr, updates,
    updatesTotal, policyLagMean, ...), in the order it reports them."""

    figures: Stats = field(default_factory=dict)

    @property
    def lr(self) -> float | None:
        return _number(self.figures.get("lr"))

    @property
    def updates_total(self) -> int | None:
        """The learner's running count of updates (every learner reports it)."""
        return _int(self.figures.get("updatesTotal"))

    @property
    def policy_lag_mean(self) -> float | None:
        return _number(self.figures.get("policyLagMean"))

    @property
    def policy_lag_max(self) -> float | None:
        return _number(self.figures.get("policyLagMax"))

    def number(self, name: str) -> float | None:
        return _number(self.figures.get(name))


@dataclass(frozen=True)
class ReplayStats:
    """`replay`: each shard's figures (`shard_0`, ...: size, capacity, adds, samples, bytes, where it runs) and
    the bytes per transition allocated and sent."""

    shards: Mapping[str, Stats] = field(default_factory=dict)
    bytes_per_transition: float | None = None
    wire_bytes_per_transition: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {**{name: dict(stats) for name, stats in self.shards.items()},
                "bytesPerTransition": self.bytes_per_transition,
                "wireBytesPerTransition": self.wire_bytes_per_transition}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReplayStats:
        return cls(shards={k: dict(v) for k, v in data.items() if isinstance(v, Mapping)},
                   bytes_per_transition=data.get("bytesPerTransition"),
                   wire_bytes_per_transition=data.get("wireBytesPerTransition"))


@dataclass(frozen=True)
class NodePlacement:
    """One Ray node of `placement`: its pod (`host`), address and the actors that reported from it."""

    host: str
    node_ip: str
    actors: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "nodeIp": self.node_ip, "actors": list(self.actors)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodePlacement:
        return cls(host=data["host"], node_ip=data["nodeIp"], actors=tuple(data["actors"]))


@dataclass(frozen=True)
class PolicyResult:
    """One policy of a multi-agent run (`policies.NAME`)."""

    episode_return_mean: float | None
    agent_steps: int
    trained: bool
    learner: LearnerStats | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"episodeReturnMean": self.episode_return_mean, "agentSteps": self.agent_steps,
                                "trained": self.trained}
        if self.learner is not None:
            data["learner"] = dict(self.learner.figures)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicyResult:
        learner = data.get("learner")
        return cls(episode_return_mean=data.get("episodeReturnMean"), agent_steps=int(data.get("agentSteps", 0)),
                   trained=bool(data.get("trained", False)),
                   learner=LearnerStats(dict(learner)) if isinstance(learner, Mapping) else None)


@dataclass(frozen=True)
class EvaluationResult:
    """`evaluation`: the episodes played with the policy of `iteration` (and `video`, its URI, when recorded)."""

    iteration: int
    timesteps: int
    episodes: int
    return_mean: float | None
    return_std: float | None
    length_mean: float | None
    returns: tuple[float, ...] = ()
    return_min: float | None = None
    return_max: float | None = None
    seconds: float | None = None
    video: str | None = None

    @classmethod
    def of(cls, iteration: int, timesteps: int, returns: list[float], lengths: list[int],
           seconds: float | None = None) -> EvaluationResult:
        """The statistics of the episodes played (returns and lengths in the order played)."""
        if not returns:
            return cls(iteration, timesteps, 0, None, None, None, (), seconds=seconds)
        return cls(iteration, timesteps, len(returns), return_mean=float(np.mean(returns)),
                   return_std=float(np.std(returns)), length_mean=float(np.mean(lengths)) if lengths else None,
                   returns=tuple(float(r) for r in returns), return_min=float(np.min(returns)),
                   return_max=float(np.max(returns)), seconds=seconds)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"iteration": self.iteration, "timesteps": self.timesteps, "episodes": self.episodes,
                                "returnMean": self.return_mean, "returnStd": self.return_std}
        if self.return_min is not None or self.return_max is not None:
            data.update(returnMin=self.return_min, returnMax=self.return_max)
        data.update(lengthMean=self.length_mean, returns=list(self.returns))
        if self.seconds is not None:
            data["seconds"] = self.seconds
        if self.video is not None:
            data["video"] = self.video
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvaluationResult:
        return cls(iteration=int(data.get("iteration", 0)), timesteps=int(data.get("timesteps", 0)),
                   episodes=int(data.get("episodes", 0)), return_mean=data.get("returnMean"),
                   return_std=data.get("returnStd"), length_mean=data.get("lengthMean"),
                   returns=tuple(data.get("returns") or ()), return_min=data.get("returnMin"),
                   return_max=data.get("returnMax"), seconds=data.get("seconds"), video=data.get("video"))


@dataclass(frozen=True)
class StepResult:
    """What one `training_step` sampled and learned: its env steps and its sections of the result."""

    env_steps: int
    learner: LearnerStats | None = None
    sampler: Stats = field(default_factory=dict)
    replay: ReplayStats | None = None
    workers: Mapping[str, Stats] = field(default_factory=dict)
    placement: Mapping[str, NodePlacement] = field(default_factory=dict)
    agent_steps: int | None = None
    policies: Mapping[str, PolicyResult] = field(default_factory=dict)
    agents: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class IterationResult:
    """One training iteration: the counters after it, what it sampled and learned (`step`), and what the run
    adds (the attempt, the first line's defaults, trackers not logging, an evaluation that finished in it).
    `extra`: keys a user's `on_train_result` callback added, kept as they were."""

    iteration: int
    timesteps: int
    episodes: int
    episode_return_mean: float | None
    env_steps_per_second: float
    time_seconds: float
    iteration_seconds: float
    policy_version: int
    step: StepResult = field(default_factory=lambda: StepResult(0))
    extra: JsonObject = field(default_factory=dict)
    attempt: int | None = None
    defaults: DefaultsRecord | None = None  # what the task-kind defaults chose (the first line's)
    tracking: Mapping[str, str] = field(default_factory=dict)  # tracker -> why it is not logging
    evaluation: EvaluationResult | None = None

    @property
    def learner(self) -> LearnerStats | None:
        return self.step.learner

    @property
    def replay(self) -> ReplayStats | None:
        return self.step.replay

    @property
    def policies(self) -> Mapping[str, PolicyResult]:
        return self.step.policies

    def with_evaluation(self, evaluation: EvaluationResult) -> IterationResult:
        return replace(self, evaluation=evaluation)

    def to_json(self) -> dict[str, Any]:
        step = self.step
        data: dict[str, Any] = {
            "iteration": self.iteration, "timesteps": self.timesteps, "episodes": self.episodes,
            "episodeReturnMean": self.episode_return_mean, "envStepsPerSecond": self.env_steps_per_second,
            "timeSeconds": self.time_seconds, "iterationSeconds": self.iteration_seconds,
            "policyVersion": self.policy_version,
        }
        if step.agent_steps is not None:
            data["agentSteps"] = step.agent_steps
        if step.learner is not None:
            data["learner"] = dict(step.learner.figures)
        if step.policies:
            data["policies"] = {name: policy.to_json() for name, policy in step.policies.items()}
        if step.agents:
            data["agents"] = {agent: {"episodeReturnMean": mean} for agent, mean in step.agents.items()}
        if step.replay is not None:
            data["replay"] = step.replay.to_json()
        if step.workers:
            data["workers"] = {name: dict(stats) for name, stats in step.workers.items()}
        if step.placement:
            data["placement"] = {node: where.to_json() for node, where in step.placement.items()}
        if step.sampler:
            data["sampler"] = dict(step.sampler)
        data.update(self.extra)
        if self.attempt is not None:
            data["attempt"] = self.attempt
        if self.defaults is not None:
            data["defaults"] = self.defaults
        if self.tracking:
            data["tracking"] = {name: {"ok": False, "problem": problem} for name, problem in self.tracking.items()}
        if self.evaluation is not None:
            data["evaluation"] = self.evaluation.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IterationResult:
        learner, replay, evaluation = data.get("learner"), data.get("replay"), data.get("evaluation")
        step = StepResult(
            env_steps=0,
            learner=LearnerStats(dict(learner)) if isinstance(learner, Mapping) else None,
            sampler=dict(data.get("sampler") or {}),
            replay=ReplayStats.from_json(replay) if isinstance(replay, Mapping) else None,
            workers={name: dict(stats) for name, stats in (data.get("workers") or {}).items()},
            placement={node: NodePlacement.from_json(where) for node, where in (data.get("placement") or {}).items()},
            agent_steps=data.get("agentSteps"),
            policies={name: PolicyResult.from_json(p) for name, p in (data.get("policies") or {}).items()},
            agents={agent: (stats or {}).get("episodeReturnMean") for agent, stats in (data.get("agents") or {}).items()},
        )
        tracking = data.get("tracking") or {}
        return cls(
            iteration=int(data["iteration"]), timesteps=int(data["timesteps"]), episodes=int(data.get("episodes", 0)),
            episode_return_mean=data.get("episodeReturnMean"),
            env_steps_per_second=data.get("envStepsPerSecond", 0.0), time_seconds=data.get("timeSeconds", 0.0),
            iteration_seconds=data.get("iterationSeconds", 0.0), policy_version=int(data.get("policyVersion", 0)),
            step=step, extra={k: v for k, v in data.items() if k not in ITERATION_KEYS},
            attempt=data.get("attempt"), defaults=data.get("defaults"),
            tracking={name: str((flag or {}).get("problem")) for name, flag in tracking.items()},
            evaluation=EvaluationResult.from_json(evaluation) if isinstance(evaluation, Mapping) else None,
        )


ITERATION_KEYS = frozenset({
    "iteration", "timesteps", "episodes", "episodeReturnMean", "envStepsPerSecond", "timeSeconds", "iterationSeconds",
    "policyVersion", "agentSteps", "learner", "policies", "agents", "replay", "workers", "placement", "sampler",
    "attempt", "defaults", "tracking", "evaluation",
})


@dataclass(frozen=True)
class EvaluationLine:
    """A results line of its own for an evaluation that finished after the last iteration's line had one."""

    iteration: int
    timesteps: int
    evaluation: EvaluationResult
    attempt: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"iteration": self.iteration, "timesteps": self.timesteps}
        if self.attempt is not None:
            data["attempt"] = self.attempt
        data["evaluation"] = self.evaluation.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvaluationLine:
        return cls(iteration=int(data["iteration"]), timesteps=int(data["timesteps"]),
                   evaluation=EvaluationResult.from_json(data["evaluation"]), attempt=data.get("attempt"))


ResultLine: TypeAlias = IterationResult | EvaluationLine


def line_from_json(data: Mapping[str, Any]) -> ResultLine:
    """A results.jsonl line: an iteration's, or an evaluation's line of its own (iteration, timesteps, attempt,
    evaluation and nothing else)."""
    if "evaluation" in data and set(data) <= {"iteration", "timesteps", "attempt", "evaluation"}:
        return EvaluationLine.from_json(data)
    return IterationResult.from_json(data)


__all__ = ["EvaluationLine", "EvaluationResult", "IterationResult", "JsonObject", "LearnerStats", "NodePlacement",
           "PolicyResult", "ReplayStats", "ResultLine", "Scalar", "Stats", "StepResult", "line_from_json"]
