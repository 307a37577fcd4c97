"""Ape-X DQN (algorithm "apex-dqn", Horgan et al. 2018): actors, replay shards and a learner that
never wait for each other.

- Rollout workers (Ray actors, spread over nodes) each explore with their own epsilon
  eps_i = base ** (1 + exponent * i / (N - 1)), compute n-step transitions and their initial
  priorities from their own TD errors, and add them straight to a replay shard (round robin).
  Between fragments they ask the learner for newer weights without waiting for the answer.
- Replay shards (`kuberl.trainer.replay.shard`) hold the prioritized replay memory.
- The learner (a Ray actor where the GPU is, or beside the driver) keeps `prefetch` sample
  requests outstanding per shard, runs double DQN with importance weights, sends new
  priorities back and publishes weights through the object store every K updates.
- The driver only supervises: it keeps one `run` call in flight per worker, gathers episode
  records and small reports, replaces dead workers and shards, and returns the iteration's
  statistics. No sample batch passes through it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from kuberl.api.hyperparams import ApexDQNParams
from kuberl.trainer.algorithms.base import RETURN_WINDOW, Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS
from kuberl.trainer.learning.device import learner_device
from kuberl.trainer.models.q_network import (
    TRANSITION_KEYS,
    QLearner,
    QPolicyFactory,
    build_q_network,
    load_weights,
    local_priorities,
    transitions_from_batch,
)
from kuberl.trainer.replay.buffers import split_capacity
from kuberl.trainer.replay.nstep import apex_epsilons, linear_schedule
from kuberl.trainer.replay.shard import start_replay_shard
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.rollout_worker import PolicyFactory, RolloutWorker, WorkerConfig

log = logging.getLogger(__name__)

MAX_ADDS_IN_FLIGHT = 2  # per worker: bounds the object store when a shard falls behind
BATCHES_PER_REQUEST = 4  # train batches per shard round trip: fewer, larger messages for the learner
SHARD_STATS_TIMEOUT_S = 10.0


def actor_died_errors() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError")
    return tuple(getattr(rex, name) for name in names if hasattr(rex, name))


class ApexDQNConfig(AlgorithmConfig):
    algorithm = "apex-dqn"

    def algorithm_class(self) -> type[ApexDQN]:
        return ApexDQN


# -- rollout worker ---------------------------------------------------------------------------------
class ApexRolloutWorker:
    """A rollout worker that feeds replay shards directly and picks up weights when they are there."""

    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, worker_index: int, epsilon: float,
                 *, gamma: float, n_step: int, learner: Any):
        torch.set_num_threads(1)
        self.worker = RolloutWorker(config, policy_factory, worker_index)
        self.worker.configure_policy(epsilon=epsilon)
        self.epsilon = epsilon
        self.gamma = gamma
        self.n_step = n_step
        self.learner = learner
        self.weights_request: Any = None
        self.weight_updates = 0
        self.next_shard = worker_index
        self.adds_in_flight: deque[Any] = deque()
        self.shard_errors = 0

    def _poll_weights(self) -> None:
        """Start a request for newer weights, or take the answer of the last one if it is in."""
        import ray

        if self.weights_request is None:
            self.weights_request = self.learner.latest_weights.remote(self.worker.policy_version)
            return
        ready, _ = ray.wait([self.weights_request], timeout=0)
        if not ready:
            return
        request, self.weights_request = self.weights_request, None
        try:
            version, refs = ray.get(request)
        except actor_died_errors():
            return  # the driver notices a dead learner
        if refs and version > self.worker.policy_version:
            self.worker.set_weights(ray.get(refs[0]), version)
            self.weight_updates += 1

    def _wait_for_adds(self, limit: int) -> None:
        import ray

        while len(self.adds_in_flight) > limit:
            try:
                ray.get(self.adds_in_flight.popleft())
            except actor_died_errors():
                self.shard_errors += 1  # those transitions are lost with the shard; the driver replaces it

    def run(self, fragments: int, shards: list[Any], filter_state: RunningStats | None = None) -> dict[str, Any]:
        """Sample `fragments` fragments into the shards; returns a small report (no transitions).

        `filter_state` is the driver's master observation filter (observation_filter: mean_std);
        the report carries the statistics this worker gathered since, for the driver to merge.
        """
        import ray

        if filter_state is not None:
            self.worker.set_filter(filter_state)
        started = time.perf_counter()
        env_steps = 0
        episodes: list[dict[str, Any]] = []
        filter_delta: RunningStats | None = None
        for _ in range(fragments):
            self._poll_weights()
            batch = self.worker.sample()
            if batch.filter_delta is not None:
                if filter_delta is None:
                    filter_delta = batch.filter_delta
                else:
                    filter_delta.merge(batch.filter_delta)
            transitions = transitions_from_batch(batch, gamma=self.gamma, n_step=self.n_step)
            priorities = local_priorities(self.worker.policy, transitions)  # type: ignore[arg-type]
            shard = shards[self.next_shard % len(shards)]
            self.next_shard += 1
            self._wait_for_adds(MAX_ADDS_IN_FLIGHT - 1)
            self.adds_in_flight.append(shard.add.remote({k: transitions[k] for k in TRANSITION_KEYS}, priorities))
            env_steps += batch.env_steps
            episodes.extend(batch.episodes)
        return {
            "worker": self.worker.worker_index,
            "envSteps": env_steps,
            "seconds": time.perf_counter() - started,
            "episodes": episodes,
            "policyVersion": self.worker.policy_version,
            "weightUpdates": self.weight_updates,
            "shardErrors": self.shard_errors,
            "epsilon": self.epsilon,
            "node": ray.get_runtime_context().get_node_id(),
            "filterDelta": filter_delta,
        }

    def stop(self) -> None:
        self.worker.stop()


# -- learner ----------------------------------------------------------------------------------------
class ApexLearner:
    """The learner's loop runs in its own thread; the actor's other methods answer meanwhile."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, params: ApexDQNParams, gpus: int,
                 shards: list[Any]):
        torch.set_num_threads(1)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        self.params = params
        self.request_size = params.train_batch_size * BATCHES_PER_REQUEST
        self.learner = QLearner(build_q_network(observation_space, action_space, params), params, learner_device(gpus))
        self.lock = threading.Lock()  # the loop's update step vs. checkpoint reads and writes
        self.shards: list[Any] = list(shards)
        self.shard_adds = [0] * len(shards)
        self.retired_adds = 0
        self.waiting_for_data = True
        self.pending: list[deque[Any]] = [deque() for _ in shards]
        self.version = 0
        self.weights_ref: Any = None
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.error: str | None = None
        self._reset_stats()
        self._publish()

    def _reset_stats(self) -> None:
        self.stats_since = time.perf_counter()
        self.stats_updates = self.learner.updates
        self.depth_sum = 0
        self.depth_count = 0
        self.starved = 0
        self.throttled_seconds = 0.0
        self.lost_samples = 0
        self.empty_replies = 0
        self.update_seconds = 0.0

    def _publish(self) -> None:
        import ray

        self.weights_ref = ray.put(self.learner.weights())
        self.version += 1

    # -- called by others --------------------------------------------------------------------------
    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="apex-learner", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=30)

    def latest_weights(self, known_version: int) -> tuple[int, list[Any]]:
        """(version, [weights ref]) when newer than `known_version`, else (version, [])."""
        if self.version > known_version:
            return self.version, [self.weights_ref]
        return self.version, []

    def set_shard(self, index: int, shard: Any) -> None:
        """A replacement for a lost shard (empty: it starts again from no transitions)."""
        self.shards[index] = shard
        self.retired_adds += self.shard_adds[index]  # adds stay a running total across replacements
        self.shard_adds[index] = 0
        self.pending[index] = deque()

    def progress(self) -> tuple[int, bool]:
        """(updates so far, whether the learner is waiting for more transitions)."""
        return self.learner.updates, self.waiting_for_data

    def take_stats(self) -> dict[str, Any]:
        now = time.perf_counter()
        elapsed = now - self.stats_since
        stats = self.learner.take_stats()
        stats.update(
            updatesPerSecond=(self.learner.updates - self.stats_updates) / elapsed if elapsed > 0 else 0.0,
            weightSyncs=self.version,
            queueDepthMean=self.depth_sum / self.depth_count if self.depth_count else None,
            queueEmptyFraction=self.starved / self.depth_count if self.depth_count else None,
            throttledSeconds=self.throttled_seconds,
            busyFraction=self.update_seconds / elapsed if elapsed > 0 else 0.0,
            samplesDropped=self.lost_samples,
            emptyReplies=self.empty_replies,
            replayAdds=self._adds(),
            beta=self._beta(),
            error=self.error,
        )
        self._reset_stats()
        return stats

    def state_files(self) -> dict[str, bytes]:
        with self.lock:
            return self.learner.state_files()

    def load_state_files(self, files: dict[str, bytes]) -> int:
        with self.lock:
            self.learner.load_state_files(files)
            self._publish()
        return self.version

    # -- the loop ----------------------------------------------------------------------------------
    def _beta(self) -> float:
        p = self.params
        return linear_schedule(self._adds(), p.priority_beta, 1.0, p.priority_beta_timesteps)

    def _adds(self) -> int:
        return self.retired_adds + sum(self.shard_adds)

    def _may_sample(self) -> bool:
        """Learning has started and the learner is not ahead of the replay ratio bound."""
        adds = self._adds()
        if adds < max(self.params.learning_starts, self.params.train_batch_size):
            return False
        ratio = self.params.max_replay_ratio
        sampled = self.learner.updates * self.params.train_batch_size + sum(map(len, self.pending)) * self.request_size
        return ratio is None or sampled < ratio * adds

    def _refresh_adds(self) -> None:
        import ray

        for index, shard in enumerate(self.shards):
            if shard is None:
                continue
            try:
                self.shard_adds[index] = ray.get(shard.stats.remote(), timeout=SHARD_STATS_TIMEOUT_S)["adds"]
            except actor_died_errors():
                self._lose_shard(index)
            except ray.exceptions.GetTimeoutError:
                pass

    def _lose_shard(self, index: int) -> None:
        self.lost_samples += len(self.pending[index]) * self.request_size
        self.pending[index] = deque()
        self.shards[index] = None

    def _top_up(self) -> None:
        beta = self._beta()
        for index, shard in enumerate(self.shards):
            if shard is None:
                continue
            while len(self.pending[index]) < self.params.prefetch and self._may_sample():
                self.pending[index].append(shard.sample.remote(self.request_size, beta, self.params.train_batch_size))

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - reported to the driver, which fails the run
            self.error = traceback.format_exc()
            log.error("Ape-X learner failed:\n%s", self.error)

    def _loop(self) -> None:
        import ray

        while not self.stopping.is_set():
            self._top_up()
            heads = {q[0]: i for i, q in enumerate(self.pending) if q}
            if not heads:
                self.waiting_for_data = True
                waited = time.perf_counter()
                time.sleep(0.02)
                self._refresh_adds()
                self.throttled_seconds += time.perf_counter() - waited
                continue
            ready, _ = ray.wait(list(heads), num_returns=len(heads), timeout=0)
            self.depth_sum += len(ready)
            self.depth_count += 1
            if not ready:
                self.starved += 1
                ready, _ = ray.wait(list(heads), num_returns=1, timeout=1.0)
            for ref in ready:
                index = heads[ref]
                if not self.pending[index] or self.pending[index][0] is not ref:
                    continue  # the shard was replaced meanwhile
                self.pending[index].popleft()
                try:
                    batch, adds = ray.get(ref)
                except actor_died_errors():
                    self._lose_shard(index)
                    continue
                self.shard_adds[index] = max(self.shard_adds[index], adds)
                if batch is None:  # this shard is still nearly empty: ask again a little later
                    self.waiting_for_data = True
                    self.empty_replies += 1
                    time.sleep(0.01)
                    continue
                self.waiting_for_data = False
                td_errors = self._learn(batch)
                self.shards[index].update_priorities.remote(batch["ids"], td_errors)

    def _learn(self, sample: dict[str, np.ndarray]) -> np.ndarray:
        """Train batches from one shard reply, one update each; the |TD errors| of all of them."""
        started = time.perf_counter()
        size = self.params.train_batch_size
        td_errors = []
        for start in range(0, len(sample["ids"]), size):
            with self.lock:
                td_errors.append(self.learner.update({k: v[start : start + size] for k, v in sample.items()}))
                if self.learner.updates % self.params.weight_sync_interval == 0:
                    self._publish()
        self.update_seconds += time.perf_counter() - started
        return np.concatenate(td_errors)


# -- the driver's side --------------------------------------------------------------------------------
class ApexDQN(Algorithm):
    params: ApexDQNParams
    fragments_per_call = 1

    def setup(self) -> None:
        import ray

        from kuberl.trainer.distributed.ray_runtime import init_ray

        init_ray()
        torch.set_num_threads(1)
        p, spec = self.params, self.spec
        self.num_workers = max(1, spec.rollouts.workers)  # Ape-X always samples in actors
        self.epsilons = apex_epsilons(self.num_workers, p.worker_epsilon_base, p.worker_epsilon_exponent)
        self.shard_options = {
            "prioritized": spec.replay.prioritized, "alpha": p.priority_alpha, "beta": p.priority_beta,
            "eps": p.priority_eps, "seed": p.seed,
        }
        self.shard_capacities = split_capacity(spec.replay.capacity, spec.replay.shards)
        self.shards = [start_replay_shard(i, c, **self.shard_options) for i, c in enumerate(self.shard_capacities)]
        self.learner = self._start_learner()
        ray.get(self.learner.start.remote())
        total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.cpus_per_worker = min(1.0, total_cpus / self.num_workers)
        self.policy_factory = QPolicyFactory.from_params(p)
        self.worker_actors = [self._start_worker(i) for i in range(self.num_workers)]
        self.in_flight: dict[Any, int] = {}
        self.worker_restarts = 0
        self.shard_restarts = 0
        self.worker_nodes: dict[int, str] = {}
        self.worker_returns: dict[int, deque[float]] = {}
        self._local_network = build_q_network(self.observation_space, self.action_space, p)
        self.known_updates = 0
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
        )

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
        self.shards[index] = start_replay_shard(index, self.shard_capacities[index], **self.shard_options)
        ray.get(self.learner.set_shard.remote(index, self.shards[index]))
        self.shard_restarts += 1
        log.warning("replay shard %d died; replaced it with an empty one (%d so far)", index, self.shard_restarts)

    def _shard_stats(self) -> dict[str, Any]:
        import ray

        refs = [shard.stats.remote() for shard in self.shards]
        stats: dict[str, Any] = {}
        for index, ref in enumerate(refs):
            try:
                stats[f"shard_{index}"] = ray.get(ref, timeout=SHARD_STATS_TIMEOUT_S)
            except actor_died_errors():
                self._replace_shard(index)
                stats[f"shard_{index}"] = {"size": 0, "adds": 0, "samples": 0, "replaced": True}
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
                        call = actor.run.remote(self.fragments_per_call, self.shards, self.obs_filter.get_state())
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
        workers = {
            f"worker_{index}": {
                **stats, "envStepsPerSecond": stats["envSteps"] / elapsed if elapsed > 0 else 0.0,
                "node": self.worker_nodes.get(index),
                "episodeReturnMean": float(np.mean(self.worker_returns[index])) if self.worker_returns.get(index) else None,
            }
            for index, stats in sorted(per_worker.items())
        }
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
            q = self._local_network(torch.as_tensor(obs, dtype=torch.float32)).numpy()
        actions = q.argmax(axis=1)
        if explore:
            random = self.np_random.random(len(actions)) < self.epsilons[-1]
            actions = np.where(random, self.np_random.integers(0, q.shape[1], len(actions)), actions)
        return actions

    def learner_state(self) -> dict[str, bytes]:
        import ray

        if self.final_learner_files is not None:
            return self.final_learner_files
        return ray.get(self.learner.state_files.remote())

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        import ray

        ray.get(self.learner.load_state_files.remote(files))

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
