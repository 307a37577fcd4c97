"""The replay-shard topology (Horgan et al. 2018's Ape-X), shared by Ape-X DQN and SAC with `replay.shards`:
rollout workers, replay shards and a learner that never wait for each other.

- Rollout workers (Ray actors, spread over nodes) act with the algorithm's sampling policy, compute n-step
  transitions (and initial priorities where the policy can), and add them straight to a replay shard
  (round robin), in the compact form shards store (`kuberl.trainer.replay.frames`: each frame once, uint8
  images stay uint8). Between fragments they ask the learner for newer weights without waiting for the
  answer. (`kuberl.trainer.distributed.shard_worker`)
- Replay shards (`kuberl.trainer.replay.shard`) hold the prioritized (or uniform) replay memory.
- The learner (a Ray actor where the GPU is, or beside the driver) keeps `prefetch` sample requests
  outstanding per shard, runs the algorithm's update with importance weights, sends new priorities back and
  publishes weights through the object store every K updates (`kuberl.trainer.distributed.shard_learner`).
- The driver (`ShardedReplay`, this module) only supervises: it keeps one `run` call in flight per worker,
  gathers episode records and small reports, replaces dead workers and shards, holds sampling back to the
  replay ratio, and returns the iteration's statistics. No sample batch passes through it.

A subclass names the algorithm's parts: the learner's builder, the workers' policy factory and their policy
settings, the initial priorities, and the local copy of the model that acts for the driver.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from functools import partial
from typing import Any, Generic, TypeVar

import numpy as np
import torch

from kuberl.api.algorithms import REGISTRY
from kuberl.trainer.algorithms.base import RETURN_WINDOW, Algorithm
from kuberl.trainer.distributed.errors import actor_died_errors
from kuberl.trainer.distributed.placement import (
    cluster_rollout_slots,
    placement_by_node,
    rollout_actor_strategy,
)
from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS
from kuberl.trainer.distributed.shard_learner import (
    SHARD_STATS_TIMEOUT_S,
    LearnerBuilder,
    ShardLearner,
    ShardParams,
)
from kuberl.trainer.distributed.shard_worker import (
    Priorities,
    ShardRolloutWorker,
    TransitionSettings,
    WorkerReport,
)
from kuberl.trainer.distributed.shard_worker_pool import ShardWorkerPool
from kuberl.trainer.iteration_result import LearnerStats, NodePlacement, ReplayStats, StepResult
from kuberl.trainer.learning.schedules import OptimizerRates
from kuberl.trainer.models.weights import load_weights, state_dict_to_numpy
from kuberl.trainer.replay.buffers import split_capacity
from kuberl.trainer.replay.memory import FrameLayout, action_bytes, frames_per_transition, replay_bytes
from kuberl.trainer.replay.shard import start_replay_shard
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.rollout_worker import PolicyFactory

log = logging.getLogger(__name__)


def shard_stats(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-shard entries of a result's `replay` (beside them: bytesPerTransition, wireBytesPerTransition)."""
    return {name: stats for name, stats in result["replay"].items() if name.startswith("shard_")}


Model = TypeVar("Model", bound=torch.nn.Module)


class ShardedReplay(Algorithm, Generic[Model]):
    """The driver of the replay-shard topology; a subclass names the algorithm's parts (below), `Model` its
    local model's class."""

    params: ShardParams
    sampler: ShardWorkerPool  # set by setup(), which construction runs
    fragments_per_call = 1
    learner_builder: LearnerBuilder  # a module-level function (it travels to the learner actor)
    initial_priorities: Priorities | None = None  # None: new transitions get the shard's largest priority

    # -- what a subclass implements ------------------------------------------------------------------
    def make_policy_factory(self) -> PolicyFactory:
        """The rollout workers' sampling policy."""
        raise NotImplementedError

    def sampling_settings(self, position: int, timesteps: int) -> PolicySettings:
        """What the policy of the worker at `position` is configured with when it starts and before each call,
        `timesteps` env steps into the run (Ape-X: its epsilon, after the warm-up; SAC: uniform until learning starts)."""
        return PolicySettings()

    def local_model(self) -> Model:
        """The driver's copy of the model the learner publishes (what `compute_actions` and exports use)."""
        raise NotImplementedError

    # -- setting up ----------------------------------------------------------------------------------
    def setup(self) -> None:
        import ray

        from kuberl.trainer.distributed.ray_runtime import init_ray

        init_ray()
        p, spec = self.params, self.spec
        self.num_workers = max(1, spec.rollouts.workers)  # the shards are fed by actors only
        self.layout = FrameLayout.of(self.observation_space, self.frame_stack, p.observation_filter)
        fragment = spec.rollouts.fragment_length
        self.shard_options = {
            "prioritized": spec.replay.prioritized, "alpha": p.priority_alpha, "beta": p.priority_beta,
            "eps": p.priority_eps, "seed": p.seed, "frames_per_transition": frames_per_transition(self.layout, fragment),
        }
        shards = REGISTRY[spec.algorithm].shard_count(self.num_workers, spec.replay.shards)
        self.shard_capacities = split_capacity(spec.replay.capacity, shards)
        self.shard_bytes = replay_bytes(self.layout, fragment, self.shard_capacities, prioritized=spec.replay.prioritized,
                                        action_size=action_bytes(self.action_space))
        self.shards = [self._start_shard(i) for i in range(len(self.shard_capacities))]
        self.sent_bytes = 0  # what the workers sent to the shards, and how many transitions that was
        self.sent_transitions = 0
        self.learner = self._start_learner()
        ray.get(self.learner.start.remote())
        total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.cpus_per_worker = min(1.0, total_cpus / self.num_workers)
        self.sampler = ShardWorkerPool(self._start_worker, self.num_workers, self.make_policy_factory(),
                                       slots=cluster_rollout_slots(self.cpus_per_worker))
        self.sampler.wait_until_up()
        self.sampler.sync_filter(self.obs_filter.get_state())
        self.shard_restarts = 0
        self.last_shard_stats: dict[int, dict[str, Any]] = {}
        self.worker_returns: dict[int, deque[float]] = {}
        self._local_model = self.local_model()
        self.known_updates = 0
        self.reported_updates = 0  # the learner's updates at the last results line
        self.final_learner_files: dict[str, bytes] | None = None
        fragment_steps = spec.rollouts.envs_per_worker * spec.rollouts.fragment_length * self.fragments_per_call
        self.slack_updates = 2 * self.num_workers * fragment_steps * p.replay_ratio
        self._local_version = 0

    def _start_learner(self) -> Any:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        gpus = self.spec.learner.gpus
        options: dict[str, Any] = {"max_concurrency": 4, "num_cpus": 0, "max_restarts": 0, **ACTOR_OPTIONS}
        if gpus > 0:
            options["num_gpus"] = gpus  # Ray places it on a node with the GPUs
        else:
            node = ray.get_runtime_context().get_node_id()
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
        actor = ray.remote(ShardLearner).options(**options)
        return actor.remote(type(self).learner_builder, self.observation_space, self.action_space, self.params,
                            self.spec.learner, self.shards)

    def _start_worker(self, position: int, slots: list[str] | None) -> Any:
        """A worker actor on the worker pods' nodes first, then on any (`slots`: the cluster's rollout slots,
        looked up here where None)."""
        import ray

        actor = ray.remote(ShardRolloutWorker).options(
            num_cpus=self.cpus_per_worker, max_restarts=0,
            scheduling_strategy=rollout_actor_strategy(position + 1, self.cpus_per_worker, slots),
            **ACTOR_OPTIONS,
        )
        return actor.remote(
            self.worker_config(), self.make_policy_factory(), position + 1, self.sampling_settings(position, self.timesteps),
            transitions=TransitionSettings(self.params.gamma, self.params.n_step, self.layout.stack_depth,
                                           type(self).initial_priorities),
            learner=self.learner,
        )

    def _start_shard(self, index: int) -> Any:
        return start_replay_shard(index, self.shard_capacities[index], memory_bytes=self.shard_bytes[index],
                                  **self.shard_options)

    # -- supervision ---------------------------------------------------------------------------------
    def _replace_shard(self, index: int) -> None:
        import ray

        with contextlib.suppress(Exception):  # it is already gone
            ray.kill(self.shards[index], no_restart=True)
        self.shards[index] = self._start_shard(index)
        ray.get(self.learner.set_shard.remote(index, self.shards[index]))
        self.shard_restarts += 1
        log.warning("replay shard %d died; replaced it with an empty one (%d so far)", index, self.shard_restarts)

    def _shard_stats(self) -> dict[str, dict[str, Any]]:
        import ray

        refs = [shard.stats.remote() for shard in self.shards]
        stats: dict[str, dict[str, Any]] = {}
        for index, ref in enumerate(refs):
            try:
                stats[f"shard_{index}"] = self.last_shard_stats[index] = ray.get(ref, timeout=SHARD_STATS_TIMEOUT_S)
            except actor_died_errors():
                self._replace_shard(index)
                stats[f"shard_{index}"] = {"size": 0, "adds": 0, "samples": 0, "replaced": True}
            except ray.exceptions.GetTimeoutError:  # alive but busy (an overloaded node): its last figures
                last = self.last_shard_stats.get(index, {"size": 0, "adds": 0, "samples": 0})
                stats[f"shard_{index}"] = {**last, "stale": True}
        return stats

    # -- one iteration -------------------------------------------------------------------------------
    def training_step(self) -> StepResult:
        import ray

        started = time.perf_counter()
        deadline = started + self.params.min_iteration_seconds
        env_steps = 0
        throttled = 0.0
        per_worker: dict[int, WorkerReport] = {}  # worker index -> its reports of this iteration as one
        while True:
            if self._workers_ahead(self.timesteps + env_steps):
                throttled += 0.01
                time.sleep(0.01)
            else:
                self.sampler.dispatch(partial(self._run_arguments, timesteps=self.timesteps + env_steps))
            remaining = deadline - time.perf_counter()
            if remaining <= 0 and env_steps > 0:
                break
            for report in self.sampler.reports(timeout=max(remaining, 0.05)):
                env_steps += report.env_steps
                self.sent_bytes += report.sent_bytes
                self.sent_transitions += report.sent_transitions
                self.obs_filter.apply_delta(report.filter_delta)
                self.sampler.sync_filter(self.obs_filter.get_state())
                self.record_episodes(report.episodes)
                earlier = per_worker.get(report.worker)
                per_worker[report.worker] = report if earlier is None else report.after(earlier)
                window = self.worker_returns.setdefault(report.worker, deque(maxlen=RETURN_WINDOW))
                window.extend(e["return"] for e in report.episodes)
        replay = self._shard_stats()
        learner = ray.get(self.learner.take_stats.remote())
        if learner.get("error"):
            raise RuntimeError(f"the {self.spec.algorithm} learner failed:\n{learner['error']}")
        elapsed = time.perf_counter() - started
        self.policy_version = learner["weightSyncs"]
        # Transitions trained on per env step sampled in this iteration: what both replay-ratio bounds hold.
        trained = (learner["updates"] - self.reported_updates) * self.params.train_batch_size
        learner["replayRatio"] = trained / env_steps if env_steps else None
        self.reported_updates = learner["updates"]
        workers = {
            f"worker_{index}": report.to_json(
                env_steps_per_second=report.env_steps / elapsed if elapsed > 0 else 0.0,
                episode_return_mean=float(np.mean(self.worker_returns[index])) if self.worker_returns.get(index) else None)
            for index, report in sorted(per_worker.items())
        }
        filled = [stats for stats in replay.values() if stats.get("adds")]  # the first add allocates a shard
        placement = placement_by_node({**workers, **replay})
        return StepResult(
            env_steps,
            learner=LearnerStats(learner),
            replay=ReplayStats(
                replay, bytes_per_transition=(sum(s["bytes"] for s in filled) / sum(s["capacity"] for s in filled)
                                              if filled else None),
                wire_bytes_per_transition=self.sent_bytes / self.sent_transitions if self.sent_transitions else None),
            workers=workers,
            placement={node: NodePlacement.from_json(where) for node, where in placement.items()},
            sampler={"workerRestarts": self.sampler.restarts, "shardRestarts": self.shard_restarts,
                     "throttledSeconds": throttled},
        )

    def _run_arguments(self, position: int, obs_filter: RunningStats | None, *, timesteps: int) -> tuple[Any, ...]:
        """A worker's run() arguments: fragments per call, the shards, the filter and its sampling settings."""
        return self.fragments_per_call, self.shards, obs_filter, self.sampling_settings(position, timesteps)

    def _workers_ahead(self, env_steps: int) -> bool:
        """Whether sampling is further ahead of the learner than `replay_ratio` allows.

        On a small machine the rollout workers and the learner share the CPUs: unchecked, the
        workers take them and the learner falls behind, so sampling waits for it (the learner in
        turn never samples more than `max_replay_ratio` times what was added).
        """
        import ray

        p = self.params
        owed = (env_steps - p.learning_starts) * p.replay_ratio - self.slack_updates
        if owed <= self.known_updates:
            return False
        # A learner that waits for data (its own replay-ratio bound, a refilling shard) is never waited for.
        self.known_updates, learner_waits = ray.get(self.learner.progress.remote())
        return owed > self.known_updates and not learner_waits

    # -- the Algorithm contract ----------------------------------------------------------------------
    def worker_weights(self) -> Any:
        return None  # workers fetch weights from the learner themselves

    def evaluation_policy(self) -> tuple[PolicyFactory, dict[str, np.ndarray]]:
        return self.sampler.policy_factory, state_dict_to_numpy(self.refreshed_local_model())

    def refreshed_local_model(self) -> Model:
        """The local model with the learner's latest published weights."""
        import ray

        if self.final_learner_files is None:  # else stopped: the local copy holds the final weights
            version, refs = ray.get(self.learner.latest_weights.remote(self._local_version))
            if refs:
                load_weights(self._local_model, ray.get(refs[0]))
                self._local_version = version
        return self._local_model

    def learner_state(self) -> dict[str, bytes]:
        import ray

        if self.final_learner_files is not None:
            return self.final_learner_files
        return ray.get(self.learner.state_files.remote())

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        import ray

        ray.get(self.learner.load_state_files.remote(files))
        self.reported_updates = ray.get(self.learner.progress.remote())[0]

    def learning_rates(self) -> dict[str, OptimizerRates]:
        import ray

        return {"default": ray.get(self.learner.learning_rates.remote())}

    def set_learning_rates(self, rates: dict[str, OptimizerRates]) -> None:
        import ray

        if "default" in rates:
            ray.get(self.learner.set_learning_rates.remote(rates["default"]))

    def stop(self) -> None:
        import ray

        if self.final_learner_files is not None:
            return
        # Keep the final model, so that the stopped algorithm can still act, evaluate and save.
        with contextlib.suppress(Exception):  # stopping what may be gone
            ray.get(self.learner.stop.remote(), timeout=30)
            self.refreshed_local_model()
            self.final_learner_files = ray.get(self.learner.state_files.remote(), timeout=30)
        if self.final_learner_files is None:
            self.final_learner_files = {}
        self.sampler.stop()
        for actor in [*self.shards, self.learner]:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
