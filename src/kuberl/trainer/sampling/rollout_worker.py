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
the learner's episode, and resets only after a game over).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from kuberl.trainer.sampling.atari import game_scores
from kuberl.trainer.sampling.atari_vector import RESETS
from kuberl.trainer.sampling.envs import EnvSettings, autoreset_mode, make_vector_env
from kuberl.trainer.sampling.filters import RunningStats, make_filter
from kuberl.trainer.sampling.wrappers import WrapperSettings


class Policy(Protocol):
    """What a rollout worker needs from a policy."""

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of (filtered) observations, and per-row extras to keep in the batch."""
        ...

    def set_weights(self, weights: Any) -> None: ...


# (observation_space, action_space, seed) -> Policy; must pickle (it travels to Ray actors).
PolicyFactory = Callable[[gym.Space, gym.Space, int], Policy]


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
    episodes: list[dict[str, Any]]
    env_steps: int  # real transitions (valid rows)
    worker: int
    policy_version: int
    filter_delta: RunningStats | None = None
    sample_seconds: float = 0.0
    env_seconds: float = 0.0  # of sample_seconds, the time spent stepping the envs (the rest: policy, copies)


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype observations travel and are stored in: integers (uint8 images) keep theirs, others float32."""
    dtype = np.dtype(dtype)
    return dtype if np.issubdtype(dtype, np.integer) else np.dtype(np.float32)


def next_step_resets(info: dict[str, Any], done: np.ndarray) -> np.ndarray:
    """The envs a next-step-autoreset vector env resets on its next step: where it says so, else where an
    episode ended."""
    resets = info.get(RESETS)
    return done if resets is None else np.asarray(resets, dtype=bool)


def worker_seeds(seed: int | None, worker_index: int) -> tuple[int | None, int]:
    """(the envs' reset seed, the policy's seed) of the worker at `worker_index`.

    With a seed both follow from it, so a run repeats, and differ between workers. The policy's comes from a
    `SeedSequence` child rather than the envs' integer, whose stream it would otherwise replay (numpy's and
    Gymnasium's generators are both PCG64 seeded through a SeedSequence). Without a seed the envs reset from
    fresh entropy and so does the policy: unseeded workers never share their exploration noise.
    """
    if seed is None:
        return None, int(np.random.SeedSequence().generate_state(1)[0])
    policy_seed = np.random.SeedSequence(seed, spawn_key=(worker_index,)).generate_state(1)[0]
    return seed + 1000 * worker_index, int(policy_seed)


class EpisodeCounter(Protocol):
    """A rollout worker, as far as its episode records go."""

    config: WorkerConfig
    worker_index: int
    episode_seq: int
    policy_version: int


def episode_record(worker: EpisodeCounter, episode_return: float, length: int, start: float, end: float,
                   **extra: Any) -> dict[str, Any]:
    """The trace record of the worker's episode number `episode_seq`; `extra` fields (such as per-agent returns)
    follow its length."""
    return {
        "experiment": worker.config.experiment,
        "worker": worker.worker_index,
        "episode": worker.episode_seq,
        "env": worker.config.env_id,
        "return": episode_return,
        "length": length,
        **extra,
        "policyVersion": worker.policy_version,
        "startTime": start,
        "endTime": end,
    }


class RolloutWorker:
    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, worker_index: int = 0):
        self.config = config
        self.worker_index = worker_index
        self.env = make_vector_env(config.env, num_envs=config.num_envs, threads=config.env_threads)
        self.same_step_reset = autoreset_mode(self.env) == AutoresetMode.SAME_STEP
        obs_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        env_seed, policy_seed = worker_seeds(config.seed, worker_index)
        self.policy = policy_factory(obs_space, self.action_space, policy_seed)
        self.filter = make_filter(config.observation_filter, tuple(obs_space.shape))
        self.policy_version = 0
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        raw_obs, _ = self.env.reset(seed=env_seed)
        self.obs = self.filter(raw_obs)
        self.raw_obs = raw_obs
        n = config.num_envs
        self.resetting = np.zeros(n, dtype=bool)  # native autoreset: this step only resets the env
        self.episode_return = np.zeros(n, dtype=np.float64)
        self.episode_length = np.zeros(n, dtype=np.int64)
        self.episode_start = np.full(n, time.time())
        self.episode_steps: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        self.episode_seq = 0

    # -- weights and settings from the learner --------------------------------------------------
    def set_weights(self, weights: Any, policy_version: int) -> None:
        self.policy.set_weights(weights)
        self.policy_version = policy_version

    def set_filter(self, state: RunningStats | None) -> None:
        self.filter.set_state(state)

    def configure_policy(self, **settings: Any) -> None:
        """Pass algorithm settings (such as DQN's epsilon) to the policy's `configure`."""
        self.policy.configure(**settings)  # type: ignore[attr-defined]

    def ping(self) -> int:
        return self.worker_index

    # -- sampling -------------------------------------------------------------------------------
    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        if isinstance(self.action_space, gym.spaces.Box):
            return np.clip(actions, self.action_space.low, self.action_space.high)
        return actions

    def sample(self) -> SampleBatch:
        """One fragment: `fragment_length` steps of every env."""
        started = time.perf_counter()
        T, N = self.config.fragment_length, self.config.num_envs
        obs_shape = self.obs.shape[1:]
        # Observations keep their own dtype (uint8 frames); they become float on the device that uses them.
        obs_dtype = stored_dtype(self.obs.dtype)
        obs_buf = np.empty((T, N, *obs_shape), dtype=obs_dtype)
        next_buf = np.empty((T, N, *obs_shape), dtype=obs_dtype)
        rewards = np.empty((T, N), dtype=np.float32)
        terminateds = np.empty((T, N), dtype=bool)
        truncateds = np.empty((T, N), dtype=bool)
        valid = np.empty((T, N), dtype=bool)
        actions_buf: np.ndarray | None = None
        extras: dict[str, np.ndarray] = {}
        episodes: list[dict[str, Any]] = []
        record_steps = self.config.record_steps
        env_seconds = 0.0

        for t in range(T):
            actions, policy_extras = self.policy.compute_actions(self.obs, True)
            if actions_buf is None:
                actions_buf = np.empty((T, *actions.shape), dtype=actions.dtype)
                extras = {k: np.empty((T, *v.shape), dtype=v.dtype) for k, v in policy_extras.items()}
            stepped = time.perf_counter()
            raw_next, reward, terminated, truncated, info = self.env.step(self._env_actions(actions))
            env_seconds += time.perf_counter() - stepped
            next_obs = self.filter(raw_next)
            step_valid = ~self.resetting
            done = (terminated | truncated) & step_valid

            obs_buf[t] = self.obs
            next_buf[t] = next_obs
            actions_buf[t] = actions
            for k, v in policy_extras.items():
                extras[k][t] = v
            rewards[t] = reward
            terminateds[t] = terminated & step_valid
            truncateds[t] = truncated & step_valid
            valid[t] = step_valid

            if self.same_step_reset and done.any():
                # The env already reset; the transition's real next obs is in the info.
                final = np.stack([info["final_obs"][i] for i in np.flatnonzero(done)]).astype(obs_dtype)
                next_buf[t][done] = self.filter(final, update=False)

            self.episode_return += np.where(step_valid, reward, 0.0)
            self.episode_length += step_valid
            if record_steps:
                for i in np.flatnonzero(step_valid):
                    self.episode_steps[i].append(
                        {"obs": self.raw_obs[i].tolist(), "action": actions[i].tolist(), "reward": float(reward[i])}
                    )
            if done.any():
                episodes.extend(self._finish_episodes(done, info))
            if not self.same_step_reset:
                reset_now = self.resetting
                self.resetting = next_step_resets(info, done)
                self.episode_start[reset_now] = time.time()
            self.obs = next_obs
            self.raw_obs = raw_next

        data = {
            "obs": obs_buf, "actions": actions_buf, "rewards": rewards, "terminateds": terminateds,
            "truncateds": truncateds, "next_obs": next_buf, "valid": valid, **extras,
        }
        return SampleBatch(
            data=data, episodes=episodes, env_steps=int(valid.sum()), worker=self.worker_index,
            policy_version=self.policy_version, filter_delta=self.filter.take_delta(),
            sample_seconds=time.perf_counter() - started, env_seconds=env_seconds,
        )

    def _finish_episodes(self, done: np.ndarray, info: dict[str, Any]) -> list[dict[str, Any]]:
        """Episode records of the envs that finished one. An env that scores games ends an episode only
        with the game (not with a life), and its record holds the game's unclipped score."""
        indices = np.flatnonzero(done)
        if self.config.scores_games:
            ended, returns, lengths = game_scores(info, done)
            indices = np.flatnonzero(ended)
            self.episode_return[indices] = returns[indices]
            self.episode_length[indices] = lengths[indices]
        now = time.time()
        records = []
        for i in indices:
            self.episode_seq += 1
            record = episode_record(self, float(self.episode_return[i]), int(self.episode_length[i]),
                                    float(self.episode_start[i]), now)
            if self.config.record_steps:
                record["steps"] = self.episode_steps[i]
                self.episode_steps[i] = []
            records.append(record)
        self.episode_return[indices] = 0.0
        self.episode_length[indices] = 0
        if self.same_step_reset:
            self.episode_start[indices] = now
        return records

    def stop(self) -> None:
        self.env.close()
