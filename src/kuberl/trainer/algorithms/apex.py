"""Ape-X DQN (algorithm "apex-dqn", Horgan et al. 2018): actors, replay shards and a learner that
never wait for each other.

- Rollout workers (Ray actors, spread over nodes) each explore with their own epsilon
  eps_i = base ** (1 + exponent * i / (N - 1)), reached from `epsilon_start` over the run's first
  `epsilon_timesteps` env steps (few workers would otherwise start nearly greedy on an untrained
  network, and replay would hold one action's transitions: see `ApexDQNParams`), compute n-step transitions and their initial
  priorities from their own TD errors, and add them straight to a replay shard (round robin), in
  the compact form shards store (`kuberl.trainer.replay.frames`: each frame once, uint8 images
  stay uint8).
  Between fragments they ask the learner for newer weights without waiting for the answer.
  (`kuberl.trainer.distributed.apex_worker`)
- Replay shards (`kuberl.trainer.replay.shard`) hold the prioritized replay memory.
- The learner (a Ray actor where the GPU is, or beside the driver) keeps `prefetch` sample
  requests outstanding per shard, runs double DQN with importance weights, sends new
  priorities back and publishes weights through the object store every K updates
  (`kuberl.trainer.distributed.apex_learner`; its loss is DQN's).
- The driver only supervises: it keeps one `run` call in flight per worker, gathers episode
  records and small reports, replaces dead workers and shards, and returns the iteration's
  statistics. No sample batch passes through it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from kuberl.api.hyperparams import ApexDQNParams
from kuberl.trainer.algorithms.base import RETURN_WINDOW, Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.distributed.apex_learner import SHARD_STATS_TIMEOUT_S, ApexLearner
from kuberl.trainer.distributed.apex_worker import ApexRolloutWorker
from kuberl.trainer.distributed.errors import actor_died_errors
from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS
from kuberl.trainer.learning.device import obs_tensor
from kuberl.trainer.models.greedy import GreedyQ
from kuberl.trainer.models.q_network import build_q_network
from kuberl.trainer.models.weights import load_weights, state_dict_to_numpy
from kuberl.trainer.replay.buffers import split_capacity
from kuberl.trainer.replay.memory import FrameLayout, frames_per_transition, replay_bytes
from kuberl.trainer.replay.shard import start_replay_shard
from kuberl.trainer.sampling.policies import QPolicyFactory

log = logging.getLogger(__name__)


def apex_epsilons(workers: int, base: float = 0.4, exponent: float = 7.0) -> list[float]:
    """Ape-X per-worker exploration: eps_i = base ** (1 + exponent * i / (N - 1)); one worker gets base."""
    if workers < 1:
        return []
    if workers == 1:
        return [base]
    return [base ** (1 + exponent * i / (workers - 1)) for i in range(workers)]


def shard_stats(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-shard entries of a result's `replay` (beside them: bytesPerTransition, wireBytesPerTransition)."""
    return {name: stats for name, stats in result["replay"].items() if name.startswith("shard_")}


class ApexDQNConfig(AlgorithmConfig):
    algorithm = "apex-dqn"

    def algorithm_class(self) -> type[ApexDQN]:
        return ApexDQN


# -- the driver's side --------------------------------------------------------------------------------
class ApexDQN(Algorithm):
    params: ApexDQNParams
    fragments_per_call = 1

    def setup(self) -> None:
        import ray

        from kuberl.trainer.distributed.ray_runtime import init_ray

        init_ray()
        p, spec = self.params, self.spec
        self.num_workers = max(1, spec.rollouts.workers)  # Ape-X always samples in actors
        self.epsilons = apex_epsilons(self.num_workers, p.worker_epsilon_base, p.worker_epsilon_exponent)
        self.layout = FrameLayout.of(self.observation_space, self.frame_stack, p.observation_filter)
        fragment = spec.rollouts.fragment_length
        self.shard_options = {
            "prioritized": spec.replay.prioritized, "alpha": p.priority_alpha, "beta": p.priority_beta,
            "eps": p.priority_eps, "seed": p.seed, "frames_per_transition": frames_per_transition(self.layout, fragment),
        }
        self.shard_capacities = split_capacity(spec.replay.capacity, spec.replay.shards)
        self.shard_bytes = replay_bytes(self.layout, fragment, self.shard_capacities, prioritized=spec.replay.prioritized)
        self.shards = [self._start_shard(i) for i in range(len(self.shard_capacities))]
        self.sent_bytes = 0  # what the workers sent to the shards, and how many transitions that was
        self.sent_transitions = 0
        self.learner = self._start_learner()
        ray.get(self.learner.start.remote())
        total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.cpus_per_worker = min(1.0, total_cpus / self.num_workers)
        self.policy_factory = QPolicyFactory.from_params(p)
        self.worker_actors = [self._start_worker(i) for i in range(self.num_workers)]
        self.in_flight: dict[Any, int] = {}
        self.worker_restarts = 0
        self.shard_restarts = 0
        self.last_shard_stats: dict[int, dict[str, Any]] = {}
        self.worker_nodes: dict[int, str] = {}
        self.worker_returns: dict[int, deque[float]] = {}
        self._local_network = build_q_network(self.observation_space, self.action_space, p)
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
        actor = ray.remote(ApexLearner).options(**options)
        return actor.remote(self.observation_space, self.action_space, self.params, gpus, self.shards)

    def _start_worker(self, position: int) -> Any:
        import ray

        actor = ray.remote(ApexRolloutWorker).options(
            num_cpus=self.cpus_per_worker, max_restarts=0, scheduling_strategy="SPREAD", **ACTOR_OPTIONS
        )
        return actor.remote(
            self.worker_config(), self.policy_factory, position + 1, self.epsilons[position],
            gamma=self.params.gamma, n_step=self.params.n_step, learner=self.learner,
            stack_depth=self.layout.stack_depth, epsilon_start=self.params.epsilon_start,
            epsilon_timesteps=self.params.epsilon_timesteps,
        )

    def _start_shard(self, index: int) -> Any:
        return start_replay_shard(index, self.shard_capacities[index], memory_bytes=self.shard_bytes[index],
                                  **self.shard_options)

    # -- supervision ---------------------------------------------------------------------------------
    def _replace_worker(self, position: int) -> None:
        import ray

        with contextlib.suppress(Exception):  # it is already gone
            ray.kill(self.worker_actors[position], no_restart=True)
        self.worker_actors[position] = self._start_worker(position)
        self.worker_restarts += 1
        log.warning("Ape-X rollout worker %d died; replaced it (%d so far)", position + 1, self.worker_restarts)

    def _replace_shard(self, index: int) -> None:
        import ray

        with contextlib.suppress(Exception):  # it is already gone
            ray.kill(self.shards[index], no_restart=True)
        self.shards[index] = self._start_shard(index)
        ray.get(self.learner.set_shard.remote(index, self.shards[index]))
        self.shard_restarts += 1
        log.warning("replay shard %d died; replaced it with an empty one (%d so far)", index, self.shard_restarts)

    def _shard_stats(self) -> dict[str, Any]:
        import ray

        refs = [shard.stats.remote() for shard in self.shards]
        stats: dict[str, Any] = {}
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
    def training_step(self) -> dict[str, Any]:
        import ray

        started = time.perf_counter()
        deadline = started + self.params.min_iteration_seconds
        env_steps = 0
        throttled = 0.0
        per_worker: dict[int, dict[str, Any]] = {}
        while True:
            if self._workers_ahead(self.timesteps + env_steps):
                throttled += 0.01
                time.sleep(0.01)
            else:
                for position, actor in enumerate(self.worker_actors):
                    if position not in self.in_flight.values():
                        call = actor.run.remote(self.fragments_per_call, self.shards, self.obs_filter.get_state(),
                                                self.timesteps + env_steps)
                        self.in_flight[call] = position
            remaining = deadline - time.perf_counter()
            if remaining <= 0 and env_steps > 0:
                break
            if not self.in_flight:
                continue
            ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=max(remaining, 0.05))
            for ref in ready:
                position = self.in_flight.pop(ref)
                try:
                    report = ray.get(ref)
                except actor_died_errors():
                    self._replace_worker(position)
                    continue
                env_steps += report["envSteps"]
                self.sent_bytes += report["sentBytes"]
                self.sent_transitions += report["sentTransitions"]
                self.obs_filter.apply_delta(report["filterDelta"])
                self.record_episodes(report["episodes"])
                self.worker_nodes[report["worker"]] = report["node"]
                mine = per_worker.setdefault(report["worker"], {"envSteps": 0, "seconds": 0.0})
                window = self.worker_returns.setdefault(report["worker"], deque(maxlen=RETURN_WINDOW))
                window.extend(e["return"] for e in report["episodes"])
                mine["envSteps"] += report["envSteps"]
                mine["seconds"] += report["seconds"]
                mine.update(epsilon=report["epsilon"], policyVersion=report["policyVersion"],
                            weightUpdates=report["weightUpdates"], shardErrors=report["shardErrors"])
        replay = self._shard_stats()
        learner = ray.get(self.learner.take_stats.remote())
        if learner.get("error"):
            raise RuntimeError(f"the Ape-X learner failed:\n{learner['error']}")
        elapsed = time.perf_counter() - started
        self.policy_version = learner["weightSyncs"]
        # Transitions trained on per env step sampled in this iteration: what both replay-ratio bounds hold.
        trained = (learner["updates"] - self.reported_updates) * self.params.train_batch_size
        learner["replayRatio"] = trained / env_steps if env_steps else None
        self.reported_updates = learner["updates"]
        workers = {
            f"worker_{index}": {
                **stats, "envStepsPerSecond": stats["envSteps"] / elapsed if elapsed > 0 else 0.0,
                "node": self.worker_nodes.get(index),
                "episodeReturnMean": float(np.mean(self.worker_returns[index])) if self.worker_returns.get(index) else None,
            }
            for index, stats in sorted(per_worker.items())
        }
        filled = [stats for stats in replay.values() if stats.get("adds")]  # the first add allocates a shard
        replay["bytesPerTransition"] = (sum(s["bytes"] for s in filled) / sum(s["capacity"] for s in filled)
                                        if filled else None)
        replay["wireBytesPerTransition"] = self.sent_bytes / self.sent_transitions if self.sent_transitions else None
        return {
            "envSteps": env_steps,
            "learner": learner,
            "replay": replay,
            "workers": workers,
            "sampler": {
                "workerRestarts": self.worker_restarts, "shardRestarts": self.shard_restarts,
                "throttledSeconds": throttled,
            },
        }

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

    def evaluation_policy(self) -> tuple[QPolicyFactory, dict[str, np.ndarray]]:
        self._refresh_local_network()
        return self.policy_factory, state_dict_to_numpy(self._local_network)

    def _refresh_local_network(self) -> None:
        import ray

        if self.final_learner_files is not None:
            return  # stopped: the local copy holds the final weights
        version, refs = ray.get(self.learner.latest_weights.remote(self._local_version))
        if refs:
            load_weights(self._local_network, ray.get(refs[0]))
            self._local_version = version

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        self._refresh_local_network()
        with torch.no_grad():
            q = self._local_network(obs_tensor(obs)).numpy()
        actions = q.argmax(axis=1)
        if explore:
            random = self.np_random.random(len(actions)) < self.epsilons[-1]
            actions = np.where(random, self.np_random.integers(0, q.shape[1], len(actions)), actions)
        return actions

    def policy_module(self) -> torch.nn.Module:
        self._refresh_local_network()
        return GreedyQ(copy.deepcopy(self._local_network).eval())

    def learner_state(self) -> dict[str, bytes]:
        import ray

        if self.final_learner_files is not None:
            return self.final_learner_files
        return ray.get(self.learner.state_files.remote())

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        import ray

        ray.get(self.learner.load_state_files.remote(files))
        self.reported_updates = ray.get(self.learner.progress.remote())[0]

    def stop(self) -> None:
        import ray

        if self.final_learner_files is not None:
            return
        # Keep the final model, so that the stopped algorithm can still act, evaluate and save.
        with contextlib.suppress(Exception):  # stopping what may be gone
            ray.get(self.learner.stop.remote(), timeout=30)
            self._refresh_local_network()
            self.final_learner_files = ray.get(self.learner.state_files.remote(), timeout=30)
        if self.final_learner_files is None:
            self.final_learner_files = {}
        for actor in [*self.worker_actors, *self.shards, self.learner]:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self.worker_actors, self.in_flight = [], {}
