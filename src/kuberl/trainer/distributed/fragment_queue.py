"""IMPALA's and APPO's rollout pool: workers that sample without waiting, a bounded queue of their fragments.

Each rollout worker (a Ray actor, spread over the nodes) has up to `requests_per_worker` sample calls
queued, so it starts its next fragment as soon as one is done, with whatever weights it holds. Finished
fragments wait in a queue for the learner. The queue is bounded: while it holds `queue_size` fragments no
new sample call goes out (backpressure), and the workers stop once their queued calls are done. The learner
never waits on a slow worker: it takes whatever fragments are ready. Weights go out through the object
store, one `ray.put` per broadcast; a worker that dies is replaced, its queued calls forgotten, and the
replacement gets the latest weights and filter. With 0 workers one in-process worker samples on demand.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from typing import Any

from kuberl.trainer.distributed.errors import actor_died_errors
from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.rollout_worker import PolicyFactory, RolloutWorker, SampleBatch, WorkerConfig

log = logging.getLogger(__name__)


class FragmentQueue:
    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, num_workers: int, *,
                 queue_size: int, requests_per_worker: int):
        self.config = config
        self.policy_factory = policy_factory
        self.queue_size = queue_size
        self.requests_per_worker = requests_per_worker
        self.queue: deque[SampleBatch] = deque()
        self.in_flight: dict[Any, int] = {}  # sample call -> worker position
        self.restarts = 0
        self.backpressured_polls = 0
        self._weights: tuple[Any, int] | None = None  # (object ref, version), for replacements
        self._filter_state: RunningStats | None = None
        self.local_worker: RolloutWorker | None = None
        self.actors: list[Any] = []
        if num_workers == 0:
            self.local_worker = RolloutWorker(config, policy_factory, worker_index=0)
            return
        import ray

        from kuberl.trainer.distributed.ray_runtime import init_ray

        init_ray()
        self.cpus_per_worker = min(1.0, float(ray.cluster_resources().get("CPU", 1.0)) / num_workers)
        self.actors = [self._new_actor(position) for position in range(num_workers)]

    def _new_actor(self, position: int) -> Any:
        import ray

        actor_class = ray.remote(RolloutWorker).options(
            num_cpus=self.cpus_per_worker, max_restarts=0, scheduling_strategy="SPREAD", **ACTOR_OPTIONS
        )
        actor = actor_class.remote(self.config, self.policy_factory, position + 1)
        if self._weights is not None:
            actor.set_weights.remote(*self._weights)
        if self._filter_state is not None:
            actor.set_filter.remote(self._filter_state)
        return actor

    # -- from the learner ------------------------------------------------------------------------
    def broadcast(self, weights: Any, version: int) -> None:
        """New weights for every worker: one object in the store, a reference to each worker."""
        if self.local_worker is not None:
            self.local_worker.set_weights(weights, version)
            return
        import ray

        self._weights = (ray.put(weights), version)
        for actor in self.actors:
            actor.set_weights.remote(*self._weights)

    def sync_filter(self, state: RunningStats | None) -> None:
        if state is None:
            return
        if self.local_worker is not None:
            self.local_worker.set_filter(state)
            return
        self._filter_state = state
        for actor in self.actors:
            actor.set_filter.remote(state)

    def poll(self, timeout: float) -> list[SampleBatch]:
        """Move finished fragments into the queue and return them; wait up to `timeout` when none is ready."""
        if self.local_worker is not None:
            if timeout > 0 and len(self.queue) < self.queue_size:
                self.queue.append(self.local_worker.sample())
                return [self.queue[-1]]
            return []
        import ray

        self._request()
        if not self.in_flight:
            return []
        ready, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=0)
        if not ready and timeout > 0:
            ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=timeout)
        arrived: list[SampleBatch] = []
        for ref in ready:
            position = self.in_flight.pop(ref, None)
            if position is None:
                continue  # its worker died and was replaced meanwhile
            try:
                arrived.append(ray.get(ref))
            except actor_died_errors():
                self._replace(position)
        self.queue.extend(arrived)
        self._request()
        return arrived

    def take(self, count: int) -> list[SampleBatch]:
        """The `count` oldest fragments, or none when fewer are queued."""
        if len(self.queue) < count:
            return []
        return [self.queue.popleft() for _ in range(count)]

    # -- the pool --------------------------------------------------------------------------------
    def _request(self) -> None:
        """Queue sample calls on workers with room for one, unless the queue is full."""
        if len(self.queue) >= self.queue_size:
            self.backpressured_polls += 1
            return
        outstanding = [0] * len(self.actors)
        for position in self.in_flight.values():
            outstanding[position] += 1
        for position, actor in enumerate(self.actors):
            for _ in range(self.requests_per_worker - outstanding[position]):
                self.in_flight[actor.sample.remote()] = position

    def _replace(self, position: int) -> None:
        import ray

        with contextlib.suppress(Exception):  # it is gone already
            ray.kill(self.actors[position], no_restart=True)
        self.in_flight = {ref: p for ref, p in self.in_flight.items() if p != position}
        self.actors[position] = self._new_actor(position)
        self.restarts += 1
        log.warning("rollout worker %d died; replaced it (%d replacements so far)", position + 1, self.restarts)

    def stop(self) -> None:
        if self.local_worker is not None:
            self.local_worker.stop()
            self.local_worker = None
        if self.actors:
            import ray

            for actor in self.actors:
                with contextlib.suppress(Exception):  # it may be gone already
                    ray.kill(actor, no_restart=True)
            self.actors, self.in_flight = [], {}
