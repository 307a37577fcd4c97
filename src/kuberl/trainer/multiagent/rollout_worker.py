"""The multi-agent rollout worker: N PettingZoo Parallel envs, one batched call per policy per step.

Each step groups the live agents of every env by the policy that acts for them (`PolicyMap`), asks each policy
once for all of its agents' actions, and steps every env with its agents' actions. Each agent's steps are a
`Segment` of its own, cut where the agent terminates or is truncated (or leaves without saying so: truncated and
valued from the observation it was given on leaving, or terminated where it was given none), started where it appears (at the episode's start, or later). At the fragment's end each policy's
segments are packed into [T, M] arrays (`segments.pack`): one `SampleBatch` per policy, that the single-agent
learners take as they are. An env whose agents are all gone ends its episode (the team return is the sum of its
agents' rewards) and resets in the same step.

`MultiAgentWorkerSet` is the `WorkerSet` of these workers: in-process with `rollouts.workers: 0`, else Ray actors.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from kuberl.trainer.multiagent.envs import multi_agent_factory, wrap_parallel
from kuberl.trainer.multiagent.policy_map import PolicyMap
from kuberl.trainer.multiagent.segments import Segment, column_keys, pack
from kuberl.trainer.sampling.episode_records import AgentEpisode, EpisodeRecord, StepRecord, episode_record
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.rollout_worker import (
    Policy,
    PolicyFactory,
    SampleBatch,
    WorkerConfig,
)
from kuberl.trainer.sampling.seeds import worker_seeds
from kuberl.trainer.sampling.worker_set import WorkerSet


@dataclass(frozen=True)
class MultiAgentPolicies:
    """What a multi-agent worker acts with: the map, and per policy its factory and spaces. Pickles to Ray actors."""

    policy_map: PolicyMap
    factories: Mapping[str, PolicyFactory]
    spaces: dict[str, tuple[gym.Space, gym.Space]]

    def build(self, seed: int) -> dict[str, Policy]:
        return {name: self.factories[name](*self.spaces[name], seed + position)
                for position, name in enumerate(self.policy_map.names)}


@dataclass
class MultiAgentSampleBatch:
    policy_batches: dict[str, SampleBatch]  # per policy: its agents' steps, [T, M]
    episodes: list[EpisodeRecord]
    env_steps: int
    agent_steps: dict[str, int]  # per policy
    worker: int
    policy_version: int
    filter_delta: RunningStats | None = None
    sample_seconds: float = 0.0
    env_seconds: float = 0.0


@dataclass
class EpisodeState:
    """One env's episode so far."""

    start: float = field(default_factory=time.time)
    length: int = 0
    team_return: float = 0.0
    returns: dict[str, float] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)


def agent_end(terminated: bool, truncated: bool, alive: bool, given: Any, acted_on: Any) -> tuple[bool, bool, Any]:
    """(terminated, truncated, next observation) of an agent's step, from the env's flags, whether the agent is
    still in `env.agents`, the observation the step gave it (None: none) and the one it acted on.

    An agent that leaves without a flag is cut there: truncated, valued from the observation it was given on
    leaving, or, given none, terminated, as there is no next state to value and it earns nothing more in this env
    (valuing the observation it acted on would count that state's future twice). A truncated agent given no
    observation keeps the one it acted on."""
    if not alive and not (terminated or truncated):
        terminated, truncated = given is None, given is not None
    return terminated, truncated, acted_on if given is None else given


def env_action(space: gym.Space, action: np.ndarray) -> Any:
    if isinstance(space, gym.spaces.Box):
        return np.clip(action, space.low, space.high)
    if isinstance(space, gym.spaces.Discrete):
        return int(action)
    return action


class MultiAgentRolloutWorker:
    def __init__(self, config: WorkerConfig, policies: MultiAgentPolicies, worker_index: int = 0):
        self.config = config
        self.worker_index = worker_index
        self.instance = uuid.uuid4().hex  # see RolloutWorker.instance
        self.map = policies.policy_map
        factory = multi_agent_factory(config.env_id)
        assert factory is not None, f"{config.env_id!r} is not a multi-agent env"
        self.envs = [wrap_parallel(factory(**dict(config.env_config)), config.wrappers)
                     for _ in range(config.num_envs)]
        env_seed, policy_seed = worker_seeds(config.seed, worker_index, config.num_envs)
        self.policies = policies.build(policy_seed)
        self.policy_version = 0
        self.policy_of: dict[str, str] = {}
        self.obs: list[dict[str, Any]] = []
        for i, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if env_seed is None else env_seed + i)
            self.obs.append(dict(obs))
        self.episodes = [EpisodeState() for _ in self.envs]
        self.episode_seq = 0

    # -- weights from the learner ----------------------------------------------------------------
    def set_weights(self, weights: dict[str, Any], policy_version: int) -> None:
        for name, policy_weights in weights.items():
            self.policies[name].set_weights(policy_weights)
        self.policy_version = policy_version

    def set_filter(self, state: RunningStats | None) -> None:
        """Multi-agent runs keep no observation filter (validation refuses one)."""

    def configure_policy(self, settings: PolicySettings) -> None:
        for policy in self.policies.values():
            policy.configure(**settings.kwargs())  # type: ignore[attr-defined]

    def ping(self) -> int:
        return self.worker_index

    def _policy(self, agent: str) -> str:
        name = self.policy_of.get(agent)
        if name is None:
            name = self.policy_of[agent] = self.map.policy(agent)
        return name

    # -- sampling -------------------------------------------------------------------------------
    def _act(self) -> tuple[list[dict[str, Any]], dict[tuple[int, str], tuple[np.ndarray, dict[str, Any]]]]:
        """Every live agent's action (per env), and the observation and extras each acted on."""
        requests: dict[str, list[tuple[int, str]]] = {}
        for i, env in enumerate(self.envs):
            for agent in env.agents:
                requests.setdefault(self._policy(agent), []).append((i, agent))
        actions: list[dict[str, Any]] = [{} for _ in self.envs]
        acted: dict[tuple[int, str], tuple[np.ndarray, dict[str, Any]]] = {}
        for name, agents in requests.items():
            obs = np.stack([self.map.observation(name, agent, self.obs[i][agent]) for i, agent in agents])
            chosen, extras = self.policies[name].compute_actions(obs, True)
            for row, (i, agent) in enumerate(agents):
                actions[i][agent] = chosen[row]
                acted[(i, agent)] = (obs[row], {key: value[row] for key, value in extras.items()})
        return actions, acted

    def sample(self) -> MultiAgentSampleBatch:
        """One fragment: `fragment_length` steps of every env."""
        started = time.perf_counter()
        length = self.config.fragment_length
        segments: dict[str, list[Segment]] = {name: [] for name in self.map.names}
        active: list[dict[str, Segment]] = [{} for _ in self.envs]
        agent_steps = dict.fromkeys(self.map.names, 0)
        episodes: list[EpisodeRecord] = []
        env_seconds = 0.0
        for t in range(length):
            actions, acted = self._act()
            for i, env in enumerate(self.envs):
                stepped = time.perf_counter()
                env_actions = {agent: env_action(env.action_space(agent), a) for agent, a in actions[i].items()}
                next_obs, rewards, terminateds, truncateds, _ = env.step(env_actions)
                env_seconds += time.perf_counter() - stepped
                episode = self.episodes[i]
                alive = set(env.agents)
                for agent, action in actions[i].items():
                    name = self._policy(agent)
                    reward = float(rewards.get(agent, 0.0))
                    terminated, truncated, raw_next = agent_end(
                        bool(terminateds.get(agent, False)), bool(truncateds.get(agent, False)), agent in alive,
                        next_obs.get(agent), self.obs[i][agent])
                    segment = active[i].get(agent)
                    if segment is None:
                        segment = active[i][agent] = Segment(agent, i, t)
                        segments[name].append(segment)
                    obs, extras = acted[(i, agent)]
                    segment.add(obs, action, extras, reward, terminated, truncated,
                                self.map.observation(name, agent, raw_next))
                    agent_steps[name] += 1
                    episode.returns[agent] = episode.returns.get(agent, 0.0) + reward
                    episode.lengths[agent] = episode.lengths.get(agent, 0) + 1
                    episode.team_return += reward
                    if self.config.record_steps:
                        episode.steps.append({"step": episode.length, "agent": agent,
                                              "obs": np.asarray(self.obs[i][agent]).tolist(),
                                              "action": np.asarray(action).tolist(), "reward": reward})
                    if terminated or truncated:
                        del active[i][agent]
                episode.length += 1
                missing = [agent for agent in alive if agent not in next_obs]
                if missing:
                    raise RuntimeError(f"{self.config.env_id!r}: step() returned no observation for live agent(s) "
                                       f"{missing}")
                self.obs[i] = {agent: next_obs[agent] for agent in alive}
                if not alive:
                    episodes.append(self._finish_episode(i))
                    for segment in active[i].values():  # cannot happen: an agent gone is done
                        segment.truncateds[-1] = True
                    active[i] = {}
                    obs, _ = env.reset()
                    self.obs[i] = dict(obs)
        policy_batches = {}
        for name, policy_segments in segments.items():
            data = pack(policy_segments, length)
            if data:
                keys = tuple((None if first is None else (self.instance, *first), None if last is None
                              else (self.instance, *last)) for first, last in column_keys(policy_segments, length))
                policy_batches[name] = SampleBatch(data=data, episodes=[], env_steps=int(data["valid"].sum()),
                                                   worker=self.worker_index, policy_version=self.policy_version,
                                                   column_keys=keys)
        return MultiAgentSampleBatch(
            policy_batches=policy_batches, episodes=episodes, env_steps=length * len(self.envs),
            agent_steps=agent_steps, worker=self.worker_index, policy_version=self.policy_version,
            sample_seconds=time.perf_counter() - started, env_seconds=env_seconds,
        )

    def _finish_episode(self, i: int) -> EpisodeRecord:
        episode = self.episodes[i]
        self.episode_seq += 1
        agents: dict[str, AgentEpisode] = {
            agent: {"policy": self._policy(agent), "return": ret, "length": episode.lengths[agent]}
            for agent, ret in episode.returns.items()}
        record = episode_record(self, episode.team_return, episode.length, episode.start, time.time(), agents=agents,
                                steps=episode.steps if self.config.record_steps else None)
        self.episodes[i] = EpisodeState()
        return record

    def stop(self) -> None:
        for env in self.envs:
            env.close()


class MultiAgentWorkerSet(WorkerSet):
    """`WorkerSet` of multi-agent rollout workers (a `Sampler`)."""

    worker_class = MultiAgentRolloutWorker


__all__ = ["MultiAgentPolicies", "MultiAgentRolloutWorker", "MultiAgentSampleBatch", "MultiAgentWorkerSet",
           "env_action"]
