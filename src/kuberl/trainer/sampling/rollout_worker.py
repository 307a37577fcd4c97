"""Rollout workers: step a vector of envs with one batched policy call per step.

A `RolloutWorker` is plain Python; `WorkerSet` runs it in-process
(`rollouts.workers: 0`, the fast path) or as N Ray actors that sample in
parallel, get weights through the object store, and are replaced when they die.
Workers know nothing about any algorithm: they take a `Policy` built by a
picklable factory (PPO's samples with log-probs, DQN's with epsilon-greedy).

A sample batch holds numpy arrays shaped [T, N, ...] (T = fragment_length, N =
envs): obs, actions, rewards, terminateds, truncateds, next_obs (the real
next observation, also at episode ends), valid (False on the step in which a
native vector env resets an env: no transition happened there), plus the
policy's extras (PPO: logp).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS
from kuberl.trainer.sampling.envs import autoreset_mode, make_vector_env
from kuberl.trainer.sampling.filters import RunningStats, make_filter

log = logging.getLogger(__name__)


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


@dataclass
class SampleBatch:
    data: dict[str, np.ndarray]
    episodes: list[dict[str, Any]]
    env_steps: int  # real transitions (valid rows)
    worker: int
    policy_version: int
    filter_delta: RunningStats | None = None
    sample_seconds: float = 0.0

    def flat(self, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """Valid rows only, [T, N, ...] flattened to [rows, ...]."""
        valid = self.data["valid"].reshape(-1)
        return {k: v.reshape(-1, *v.shape[2:])[valid] for k, v in self.data.items() if keys is None or k in keys}


def worker_seed(seed: int | None, worker_index: int) -> int | None:
    return None if seed is None else seed + 1000 * worker_index


class RolloutWorker:
    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, worker_index: int = 0):
        self.config = config
        self.worker_index = worker_index
        self.env = make_vector_env(config.env_id, config.env_config, config.num_envs)
        self.same_step_reset = autoreset_mode(self.env) == AutoresetMode.SAME_STEP
        obs_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        seed = worker_seed(config.seed, worker_index)
        self.policy = policy_factory(obs_space, self.action_space, 0 if seed is None else seed)
        self.filter = make_filter(config.observation_filter, tuple(obs_space.shape))
        self.policy_version = 0
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        raw_obs, _ = self.env.reset(seed=seed)
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
        obs_buf = np.empty((T, N, *obs_shape), dtype=np.float32)
        next_buf = np.empty((T, N, *obs_shape), dtype=np.float32)
        rewards = np.empty((T, N), dtype=np.float32)
        terminateds = np.empty((T, N), dtype=bool)
        truncateds = np.empty((T, N), dtype=bool)
        valid = np.empty((T, N), dtype=bool)
        actions_buf: np.ndarray | None = None
        extras: dict[str, np.ndarray] = {}
        episodes: list[dict[str, Any]] = []
        record_steps = self.config.record_steps

        for t in range(T):
            actions, policy_extras = self.policy.compute_actions(self.obs, True)
            if actions_buf is None:
                actions_buf = np.empty((T, *actions.shape), dtype=actions.dtype)
                extras = {k: np.empty((T, *v.shape), dtype=v.dtype) for k, v in policy_extras.items()}
            raw_next, reward, terminated, truncated, info = self.env.step(self._env_actions(actions))
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
                final = np.stack([info["final_obs"][i] for i in np.flatnonzero(done)]).astype(np.float32)
                next_buf[t][done] = self.filter(final, update=False)

            self.episode_return += np.where(step_valid, reward, 0.0)
            self.episode_length += step_valid
            if record_steps:
                for i in np.flatnonzero(step_valid):
                    self.episode_steps[i].append(
                        {"obs": self.raw_obs[i].tolist(), "action": actions[i].tolist(), "reward": float(reward[i])}
                    )
            if done.any():
                episodes.extend(self._finish_episodes(np.flatnonzero(done)))
            if not self.same_step_reset:
                reset_now = self.resetting
                self.resetting = done
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
            sample_seconds=time.perf_counter() - started,
        )

    def _finish_episodes(self, indices: np.ndarray) -> list[dict[str, Any]]:
        now = time.time()
        records = []
        for i in indices:
            self.episode_seq += 1
            record: dict[str, Any] = {
                "experiment": self.config.experiment,
                "worker": self.worker_index,
                "episode": self.episode_seq,
                "env": self.config.env_id,
                "return": float(self.episode_return[i]),
                "length": int(self.episode_length[i]),
                "policyVersion": self.policy_version,
                "startTime": float(self.episode_start[i]),
                "endTime": now,
            }
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


def _actor_died_errors() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex

    return tuple(
        getattr(rex, name) for name in ("RayActorError", "ActorDiedError", "ActorUnavailableError") if hasattr(rex, name)
    )


class WorkerSet:
    """N rollout workers: in-process when N is 0, else Ray actors sampled in parallel."""

    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, num_workers: int,
                 *, num_cpus_per_worker: float = 1.0, max_sample_attempts: int = 3):
        self.config = config
        self.policy_factory = policy_factory
        self.num_workers = num_workers
        self.num_cpus_per_worker = num_cpus_per_worker
        self.max_sample_attempts = max_sample_attempts
        self.restarts = 0
        self.local_worker: RolloutWorker | None = None
        self.actors: list[Any] = []
        self._weights: tuple[Any, int] | None = None  # (object ref or weights, version) for replacements
        self._filter_state: RunningStats | None = None
        self._policy_settings: dict[str, Any] = {}
        if num_workers == 0:
            self.local_worker = RolloutWorker(config, policy_factory, worker_index=0)
        else:
            from kuberl.trainer.distributed.ray_runtime import init_ray

            init_ray()
            self.actors = [self._new_actor(i + 1) for i in range(num_workers)]

    def _new_actor(self, worker_index: int) -> Any:
        import ray

        actor_class = ray.remote(RolloutWorker).options(num_cpus=self.num_cpus_per_worker, max_restarts=0,
                                                        **ACTOR_OPTIONS)
        return actor_class.remote(self.config, self.policy_factory, worker_index)

    def replace(self, position: int) -> None:
        """Start a fresh actor in place of a dead one and bring it up to date."""
        import ray

        old = self.actors[position]
        with contextlib.suppress(Exception):  # it may be gone already
            ray.kill(old, no_restart=True)
        actor = self._new_actor(position + 1)
        if self._weights is not None:
            actor.set_weights.remote(*self._weights)
        if self._filter_state is not None:
            actor.set_filter.remote(self._filter_state)
        if self._policy_settings:
            actor.configure_policy.remote(**self._policy_settings)
        self.actors[position] = actor
        self.restarts += 1
        log.warning("rollout worker %d died; replaced it (%d replacements so far)", position + 1, self.restarts)

    def sample(self) -> list[SampleBatch]:
        """One batch from every worker that answers; dead workers are replaced and the others' batches kept."""
        if self.local_worker is not None:
            return [self.local_worker.sample()]
        import ray

        died = _actor_died_errors()
        for _ in range(self.max_sample_attempts):
            refs = [actor.sample.remote() for actor in self.actors]
            batches: list[SampleBatch] = []
            for position, ref in enumerate(refs):
                try:
                    batches.append(ray.get(ref))
                except died:
                    self.replace(position)
            if batches:
                return batches
        raise RuntimeError(f"every rollout worker died {self.max_sample_attempts} times in a row")

    def sample_refs(self) -> list[tuple[int, Any]]:
        """Start one `sample()` on every actor; (position, object ref) pairs, for callers that gather themselves."""
        return [(position, actor.sample.remote()) for position, actor in enumerate(self.actors)]

    def sync_weights(self, weights: Any, policy_version: int) -> None:
        if self.local_worker is not None:
            self.local_worker.set_weights(weights, policy_version)
            return
        import ray

        ref = ray.put(weights)
        self._weights = (ref, policy_version)
        for actor in self.actors:
            actor.set_weights.remote(ref, policy_version)

    def sync_filter(self, state: RunningStats | None) -> None:
        if state is None:
            return
        if self.local_worker is not None:
            self.local_worker.set_filter(state)
            return
        self._filter_state = state
        for actor in self.actors:
            actor.set_filter.remote(state)

    def configure_policies(self, **settings: Any) -> None:
        self._policy_settings.update(settings)
        if self.local_worker is not None:
            self.local_worker.configure_policy(**settings)
            return
        for actor in self.actors:
            actor.configure_policy.remote(**settings)

    def stop(self) -> None:
        if self.local_worker is not None:
            self.local_worker.stop()
            self.local_worker = None
        if self.actors:
            import ray

            for actor in self.actors:
                with contextlib.suppress(Exception):  # it may be gone already
                    ray.kill(actor, no_restart=True)
            self.actors = []
