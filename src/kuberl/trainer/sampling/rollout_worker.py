"""Rollout workers: step a vector of envs with one batched policy call per step.

A `RolloutWorker` is plain Python; `kuberl.trainer.sampling.worker_set.WorkerSet`
runs it in-process (`rollouts.workers: 0`, the fast path) or as N Ray actors.
Workers know nothing about any algorithm: they take a `Policy` built by a
picklable factory (PPO's samples with log-probs, DQN's with epsilon-greedy).

A sample batch holds numpy arrays shaped [T, N, ...] (T = fragment_length, N =
envs): obs (float32, or the env's own integer dtype: uint8 images stay uint8),
actions, rewards, terminateds, truncateds, next_obs (the real next
observation, also at episode ends), valid (False on the step in which a
native vector env resets an env: no transition happened there), plus the
policy's extras (PPO: logp). Such an env resets after an episode's end, unless it says
where it resets (`info[RESETS]`: ALE's vector env plays on after a lost life that ends
the learner's episode, pressing FIRE first in a game that waits for it, and resets only after a game over).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from kuberl.trainer.sampling.atari import game_scores
from kuberl.trainer.sampling.atari_vector import RESETS
from kuberl.trainer.sampling.env_groups import EnvGroup, group_slices
from kuberl.trainer.sampling.envs import EnvSettings, autoreset_mode, make_vector_env
from kuberl.trainer.sampling.episode_records import EpisodeRecord, StepRecord, episode_record
from kuberl.trainer.sampling.filters import RunningStats, make_filter
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.seeds import worker_seeds
from kuberl.trainer.sampling.wrappers import WrapperSettings


class Policy(Protocol):
    """What a rollout worker needs from a policy."""

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of (filtered) observations, and per-row extras to keep in the batch."""
        ...

    def set_weights(self, weights: Any) -> None: ...


# (observation_space, action_space, seed) -> Policy; must pickle (it travels to Ray actors).
PolicyFactory = Callable[[gym.Space, gym.Space, int], Policy]


class PolicySet(Protocol):
    """A multi-agent worker's policies, built by name from a seed (`multiagent.MultiAgentPolicies`)."""

    def build(self, seed: int) -> dict[str, Policy]: ...


# What a sampler's workers (and evaluation actors) build their policies from: one policy, or a multi-agent set.
WorkerPolicies = PolicyFactory | PolicySet


@dataclass(frozen=True)
class WorkerConfig:
    env_id: str
    env_config: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 8
    fragment_length: int = 64
    observation_filter: str = "none"
    experiment: str = ""
    seed: int | None = None
    record_steps: bool = False
    preprocessing: str = "none"  # spec.env.preprocessing
    wrappers: tuple[WrapperSettings, ...] = ()  # spec.env.wrappers
    env_threads: int = 1  # threads that step the envs, where the vector env can use them (ALE's)
    env_groups: int = 1  # groups of envs stepped in turn, one stepping while the policy acts for another

    @property
    def env(self) -> EnvSettings:
        return EnvSettings(self.env_id, dict(self.env_config), self.preprocessing, self.wrappers)  # type: ignore[arg-type]

    @property
    def scores_games(self) -> bool:
        """The env reports whole games' scores in info (atari: an episode for the learner is one life)."""
        return self.preprocessing == "atari"


@dataclass
class SampleBatch:
    data: dict[str, np.ndarray]
    episodes: list[EpisodeRecord]
    env_steps: int  # real transitions (valid rows)
    worker: int
    policy_version: int
    filter_delta: RunningStats | None = None
    sample_seconds: float = 0.0
    env_seconds: float = 0.0  # of sample_seconds, the time spent stepping the envs (the rest: policy, copies)
    # Per column: the key of the trajectory (one env's, or one agent's in one env) its first row goes on with,
    # and of the one its last row goes on into, None where there is none; what the learner carries from one
    # fragment to the next (reward normalization's running returns) is kept under these keys. Empty: (worker,
    # column) for both.
    column_keys: tuple[tuple[Hashable | None, Hashable | None], ...] = ()


def trace_ends(data: Mapping[str, Any]) -> Any:
    """Where a trajectory stops in a batch's [T, N] columns: a terminated or truncated step, or a row that is no
    transition (`valid` false); GAE and V-trace carry nothing across it. numpy arrays or torch tensors alike."""
    return data["terminateds"] | data["truncateds"] | ~data["valid"]


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype observations travel and are stored in: integers (uint8 images) keep theirs, others float32."""
    dtype = np.dtype(dtype)
    return dtype if np.issubdtype(dtype, np.integer) else np.dtype(np.float32)


def next_step_resets(info: dict[str, Any], done: np.ndarray) -> np.ndarray:
    """The envs a next-step-autoreset vector env resets on its next step: where it says so, else where an
    episode ended."""
    resets = info.get(RESETS)
    return done if resets is None else np.asarray(resets, dtype=bool)


class RolloutWorker:
    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, worker_index: int = 0):
        self.config = config
        self.worker_index = worker_index
        # Names this worker's envs apart from those of a worker that had its index before it (and died).
        self.instance = uuid.uuid4().hex
        n = config.num_envs
        threads = config.env_threads  # each group's: see env_groups.py
        self.groups = [EnvGroup(make_vector_env(config.env, num_envs=cols.stop - cols.start, threads=threads), cols)
                       for cols in group_slices(n, config.env_groups)]
        first = self.groups[0].env
        self.same_step_reset = autoreset_mode(first) == AutoresetMode.SAME_STEP
        obs_space = first.single_observation_space
        self.action_space = first.single_action_space
        env_seed, policy_seed = worker_seeds(config.seed, worker_index, config.num_envs)
        self.policy = policy_factory(obs_space, self.action_space, policy_seed)
        self.filter = make_filter(config.observation_filter, tuple(obs_space.shape or ()))
        self.policy_version = 0
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        # ALE's vector env and SyncVectorEnv seed env i with seed + i, so grouping keeps every env's seed (a
        # native Gymnasium vector env draws its envs' states from one generator: there the draws differ).
        for group in self.groups:
            group.raw_obs, _ = group.env.reset(seed=None if env_seed is None else env_seed + group.columns.start)
            group.obs = self.filter(group.raw_obs)
        self.resetting = np.zeros(n, dtype=bool)  # native autoreset: this step only resets the env
        self.episode_return = np.zeros(n, dtype=np.float64)
        self.episode_length = np.zeros(n, dtype=np.int64)
        self.episode_start = np.full(n, time.time())
        self.episode_steps: list[list[StepRecord]] = [[] for _ in range(n)]
        self.episode_seq = 0

    @property
    def env(self) -> gym.vector.VectorEnv:
        """The vector env of a worker with one group (its envs' spaces and wrappers are every group's)."""
        return self.groups[0].env

    # -- weights and settings from the learner --------------------------------------------------
    def set_weights(self, weights: Any, policy_version: int) -> None:
        self.policy.set_weights(weights)
        self.policy_version = policy_version

    def set_filter(self, state: RunningStats | None) -> None:
        self.filter.set_state(state)

    def configure_policy(self, settings: PolicySettings) -> None:
        """Pass algorithm settings (such as DQN's epsilon) to the policy's `configure`."""
        self.policy.configure(**settings.kwargs())  # type: ignore[attr-defined]

    def ping(self) -> int:
        return self.worker_index

    # -- sampling -------------------------------------------------------------------------------
    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        if isinstance(self.action_space, gym.spaces.Box):
            return np.clip(actions, self.action_space.low, self.action_space.high)
        return actions

    def sample(self) -> SampleBatch:
        """One fragment: `fragment_length` steps of every env.

        Each group's step is sent, then received when the worker comes back to it, so with two groups one
        steps while the policy acts for the other; with one, this is act-then-step. Every group's last step
        is received before the fragment ends: the batch is on-policy for the weights it was sampled with.
        """
        started = time.perf_counter()
        fragment = _Fragment(self.config.fragment_length, self.config.num_envs, self.groups[0].obs)
        for group in self.groups:
            self._act(group, 0, fragment)
        for t in range(fragment.length):
            for group in self.groups:
                self._observe(group, t, fragment)
                if t + 1 < fragment.length:
                    self._act(group, t + 1, fragment)
        return SampleBatch(
            data=fragment.data(), episodes=fragment.episodes, env_steps=int(fragment.valid.sum()),
            worker=self.worker_index, policy_version=self.policy_version, filter_delta=self.filter.take_delta(),
            sample_seconds=time.perf_counter() - started, env_seconds=fragment.env_seconds,
            column_keys=tuple(((self.instance, i), (self.instance, i)) for i in range(self.config.num_envs)),
        )

    def _act(self, group: EnvGroup, t: int, fragment: _Fragment) -> None:
        """Pick the group's actions for step t and send them to its envs."""
        cols = group.columns
        actions, policy_extras = self.policy.compute_actions(group.obs, True)
        fragment.record_actions(t, cols, group.obs, actions, policy_extras)
        sent = time.perf_counter()
        group.send(self._env_actions(actions))
        fragment.env_seconds += time.perf_counter() - sent

    def _observe(self, group: EnvGroup, t: int, fragment: _Fragment) -> None:
        """Receive the group's step t and record its transitions, episode ends and resets."""
        cols = group.columns
        waited = time.perf_counter()
        raw_next, reward, terminated, truncated, info = group.recv()
        fragment.env_seconds += time.perf_counter() - waited
        next_obs = self.filter(raw_next)
        step_valid = ~self.resetting[cols]
        done = (terminated | truncated) & step_valid
        fragment.next_obs[t, cols] = next_obs
        fragment.rewards[t, cols] = reward
        fragment.terminateds[t, cols] = terminated & step_valid
        fragment.truncateds[t, cols] = truncated & step_valid
        fragment.valid[t, cols] = step_valid

        if self.same_step_reset and done.any():
            # The env already reset; the transition's real next obs is in the info.
            final = np.stack([info["final_obs"][i] for i in np.flatnonzero(done)]).astype(fragment.next_obs.dtype)
            fragment.next_obs[t, cols][done] = self.filter(final, update=False)

        self.episode_return[cols] += np.where(step_valid, reward, 0.0)
        self.episode_length[cols] += step_valid
        if self.config.record_steps:
            actions = fragment.actions[t, cols]
            for i in np.flatnonzero(step_valid):
                self.episode_steps[cols.start + i].append({"obs": group.raw_obs[i].tolist(),
                                                           "action": actions[i].tolist(), "reward": float(reward[i])})
        if done.any():
            fragment.episodes.extend(self._finish_episodes(done, info, cols.start))
        if not self.same_step_reset:
            reset_now = self.resetting[cols].copy()
            self.resetting[cols] = next_step_resets(info, done)
            self.episode_start[cols][reset_now] = time.time()
        group.obs = next_obs
        group.raw_obs = raw_next

    def _finish_episodes(self, done: np.ndarray, info: dict[str, Any], first: int = 0) -> list[EpisodeRecord]:
        """Episode records of the envs that finished one (`done` and `info` of the group whose first env is
        env `first`). An env that scores games ends an episode only with the game (not with a life), and its
        record holds the game's unclipped score."""
        indices = np.flatnonzero(done)
        if self.config.scores_games:
            ended, returns, lengths = game_scores(info, done)
            indices = np.flatnonzero(ended)
            self.episode_return[first + indices] = returns[indices]
            self.episode_length[first + indices] = lengths[indices]
        indices = first + indices
        now = time.time()
        records: list[EpisodeRecord] = []
        for i in indices:
            self.episode_seq += 1
            steps: list[StepRecord] | None = None
            if self.config.record_steps:
                steps, self.episode_steps[i] = self.episode_steps[i], []
            records.append(episode_record(self, float(self.episode_return[i]), int(self.episode_length[i]),
                                          float(self.episode_start[i]), now, steps=steps))
        self.episode_return[indices] = 0.0
        self.episode_length[indices] = 0
        if self.same_step_reset:
            self.episode_start[indices] = now
        return records

    def stop(self) -> None:
        for group in self.groups:
            group.close()


class _Fragment:
    """The [T, N, ...] buffers of one sample, filled a group's columns at a time."""

    def __init__(self, length: int, num_envs: int, obs: np.ndarray):
        self.length = length
        # Observations keep their own dtype (uint8 frames); they become float on the device that uses them.
        shape = (length, num_envs, *obs.shape[1:])
        self.obs = np.empty(shape, dtype=stored_dtype(obs.dtype))
        self.next_obs = np.empty(shape, dtype=self.obs.dtype)
        self.rewards = np.empty((length, num_envs), dtype=np.float32)
        self.terminateds = np.empty((length, num_envs), dtype=bool)
        self.truncateds = np.empty((length, num_envs), dtype=bool)
        self.valid = np.empty((length, num_envs), dtype=bool)
        self.actions: np.ndarray = np.empty(0)
        self.extras: dict[str, np.ndarray] = {}
        self.episodes: list[EpisodeRecord] = []
        self.env_seconds = 0.0  # sending steps and waiting for them
        self._num_envs = num_envs

    def record_actions(self, t: int, cols: slice, obs: np.ndarray, actions: np.ndarray,
                       extras: dict[str, np.ndarray]) -> None:
        if not self.actions.size:  # shapes and dtypes come from the policy's first answer
            self.actions = np.empty((self.length, self._num_envs, *actions.shape[1:]), dtype=actions.dtype)
            self.extras = {k: np.empty((self.length, self._num_envs, *v.shape[1:]), dtype=v.dtype)
                           for k, v in extras.items()}
        self.obs[t, cols] = obs
        self.actions[t, cols] = actions
        for k, v in extras.items():
            self.extras[k][t, cols] = v

    def data(self) -> dict[str, np.ndarray]:
        return {"obs": self.obs, "actions": self.actions, "rewards": self.rewards, "terminateds": self.terminateds,
                "truncateds": self.truncateds, "next_obs": self.next_obs, "valid": self.valid, **self.extras}
