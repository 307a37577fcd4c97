"""A finished episode's trace record: what a rollout worker reports of an episode, the line the episode traces
(traces/episodes-WORKER-SEQ.jsonl.gz) hold for it and what `on_episode_end` gets.

Its keys, in the order every record has them: experiment, worker, episode, env, return, length, agents (a
multi-agent episode's), policyVersion, startTime, endTime, steps (with traces.steps).
"""

from __future__ import annotations

from typing import NotRequired, Protocol, TypedDict

from kuberl.trainer.iteration_result import JsonValue


class StepRecord(TypedDict):
    """One step of a recorded episode (traces.steps): the raw observation acted on, the action and its reward;
    a multi-agent episode's steps also name the episode's step and the agent."""

    step: NotRequired[int]
    agent: NotRequired[str]
    obs: JsonValue
    action: JsonValue
    reward: float


# The functional syntax where a key is "return" (a keyword, so no class can name it).

# One agent's part of a multi-agent episode: its policy, its return and the steps it acted in.
AgentEpisode = TypedDict("AgentEpisode", {"policy": str, "return": float, "length": int})

EpisodeRecord = TypedDict("EpisodeRecord", {
    "experiment": str,
    "worker": int,
    "episode": int,  # the worker's count of its episodes; the algorithm's count once it records the episode
    "env": str,
    "return": float,
    "length": int,
    "agents": NotRequired[dict[str, AgentEpisode]],
    "policyVersion": int,
    "startTime": float,
    "endTime": float,
    "steps": NotRequired[list[StepRecord]],
})


class _Agents(TypedDict, total=False):
    agents: dict[str, AgentEpisode]


class RunNames(Protocol):
    """A worker's config, as far as its episode records go (WorkerConfig)."""

    @property
    def experiment(self) -> str: ...

    @property
    def env_id(self) -> str: ...


class EpisodeCounter(Protocol):
    """A rollout worker, as far as its episode records go."""

    @property
    def config(self) -> RunNames: ...

    worker_index: int
    episode_seq: int
    policy_version: int


def episode_record(worker: EpisodeCounter, episode_return: float, length: int, start: float, end: float, *,
                   agents: dict[str, AgentEpisode] | None = None,
                   steps: list[StepRecord] | None = None) -> EpisodeRecord:
    """The trace record of the worker's episode number `episode_seq`: a multi-agent episode's `agents` follow
    its length, recorded `steps` come last."""
    multi_agent: _Agents = {} if agents is None else {"agents": agents}
    record: EpisodeRecord = {
        "experiment": worker.config.experiment,
        "worker": worker.worker_index,
        "episode": worker.episode_seq,
        "env": worker.config.env_id,
        "return": episode_return,
        "length": length,
        **multi_agent,
        "policyVersion": worker.policy_version,
        "startTime": start,
        "endTime": end,
    }
    if steps is not None:
        record["steps"] = steps
    return record


__all__ = ["AgentEpisode", "EpisodeCounter", "EpisodeRecord", "StepRecord", "episode_record"]
