"""Ape-X's rollout worker actor: samples into replay shards directly and picks up weights when they are there.

It explores with its own epsilon, after a warm-up from `epsilon_start` down to it over the run's
first `epsilon_timesteps` env steps (the driver passes the run's count with every call), turns each fragment into n-step transitions with initial
priorities from its own TD errors, and adds them in the compact form (frames once, in their own
dtype: `kuberl.trainer.replay.frames`) to the shards round robin, with at most
MAX_ADDS_IN_FLIGHT adds outstanding. Between fragments it asks the learner for newer weights
without waiting for the answer.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from kuberl.trainer.distributed.errors import actor_died_errors
from kuberl.trainer.learning.device import configure_cpu_threads
from kuberl.trainer.learning.schedules import linear_schedule
from kuberl.trainer.replay.nstep import batch_priorities, compact_transitions
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.rollout_worker import PolicyFactory, RolloutWorker, WorkerConfig

MAX_ADDS_IN_FLIGHT = 2  # per worker: bounds the object store when a shard falls behind


class ApexRolloutWorker:
    """A rollout worker that feeds replay shards directly and picks up weights when they are there."""

    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, worker_index: int, epsilon: float,
                 *, gamma: float, n_step: int, learner: Any, stack_depth: int = 1,
                 epsilon_start: float | None = None, epsilon_timesteps: int = 1):
        configure_cpu_threads()
        self.worker = RolloutWorker(config, policy_factory, worker_index)
        self.final_epsilon = epsilon
        self.epsilon_start = epsilon if epsilon_start is None else epsilon_start
        self.epsilon_timesteps = epsilon_timesteps
        self.timesteps = 0  # the run's env steps, as the driver last said, plus this worker's since
        self.epsilon = self._set_epsilon()
        self.gamma = gamma
        self.n_step = n_step
        self.stack_depth = stack_depth
        self.learner = learner
        self.weights_request: Any = None
        self.weight_updates = 0
        self.next_shard = worker_index
        self.adds_in_flight: deque[Any] = deque()
        self.shard_errors = 0

    def _set_epsilon(self) -> float:
        """This worker's epsilon at the run's env steps so far: the warm-up, then its own."""
        epsilon = linear_schedule(self.timesteps, self.epsilon_start, self.final_epsilon, self.epsilon_timesteps)
        self.worker.configure_policy(epsilon=epsilon)
        return epsilon

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

    def run(self, fragments: int, shards: list[Any], filter_state: RunningStats | None = None,
            timesteps: int | None = None) -> dict[str, Any]:
        """Sample `fragments` fragments into the shards; returns a small report (no transitions).

        `timesteps` is the run's env steps so far (all workers), which the epsilon warm-up follows.

        `filter_state` is the driver's master observation filter (observation_filter: mean_std);
        the report carries the statistics this worker gathered since, for the driver to merge.
        """
        import ray

        if filter_state is not None:
            self.worker.set_filter(filter_state)
        if timesteps is not None:
            self.timesteps = timesteps
        started = time.perf_counter()
        env_steps = 0
        sent_bytes = sent = 0
        episodes: list[dict[str, Any]] = []
        filter_delta: RunningStats | None = None
        for _ in range(fragments):
            self._poll_weights()
            self.epsilon = self._set_epsilon()
            batch = self.worker.sample()
            if batch.filter_delta is not None:
                if filter_delta is None:
                    filter_delta = batch.filter_delta
                else:
                    filter_delta.merge(batch.filter_delta)
            transitions, rows = compact_transitions(batch, gamma=self.gamma, n_step=self.n_step,
                                                    stack_depth=self.stack_depth)
            priorities = batch_priorities(self.worker.policy, batch, rows)  # type: ignore[arg-type]
            shard = shards[self.next_shard % len(shards)]
            self.next_shard += 1
            self._wait_for_adds(MAX_ADDS_IN_FLIGHT - 1)
            self.adds_in_flight.append(shard.add.remote(transitions, priorities))
            sent_bytes += transitions.nbytes + priorities.nbytes
            sent += len(transitions)
            env_steps += batch.env_steps
            self.timesteps += batch.env_steps
            episodes.extend(batch.episodes)
        return {
            "worker": self.worker.worker_index,
            "envSteps": env_steps,
            "sentBytes": sent_bytes,
            "sentTransitions": sent,
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
