"""IMPALA's and APPO's rollout pool: workers that sample without waiting, a bounded queue of their fragments.

Each rollout worker (a Ray actor of a `WorkerSet`, spread over the nodes) has up to `requests_per_worker`
sample calls queued, so it starts its next fragment as soon as one is done, with whatever weights it
holds. Finished fragments wait in a queue for the learner. The queue is bounded: while it holds
`queue_size` fragments no new sample call goes out (backpressure), and the workers stop once their queued
calls are done. The learner never waits on a slow worker: it takes whatever fragments are ready. Weights
go out through the object store, one `ray.put` per broadcast; a worker that dies is replaced, its queued
calls forgotten, and the replacement gets the latest weights and filter. With 0 workers one in-process
worker samples on demand.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kuberl.trainer.distributed.errors import DeathsInARow, actor_died_errors
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.rollout_worker import SampleBatch, WorkerConfig, WorkerPolicies
from kuberl.trainer.sampling.worker_set import WorkerSet


class FragmentQueue:
    """IMPALA's and APPO's `Sampler`: workers that sample without waiting, into a bounded queue."""

    def __init__(self, config: WorkerConfig, policy_factory: WorkerPolicies, num_workers: int, *,
                 queue_size: int, requests_per_worker: int, worker_set: type[WorkerSet] = WorkerSet):
        self.queue_size = queue_size
        self.requests_per_worker = requests_per_worker
        self.queue: deque[SampleBatch] = deque()
        self.in_flight: dict[Any, int] = {}  # sample call -> worker position
        self.backpressured_polls = 0
        self.deaths = DeathsInARow(num_workers)  # since a fragment last arrived
        cpus = 1.0
        if num_workers > 0:
            import ray

            from kuberl.trainer.distributed.ray_runtime import init_ray

            init_ray()
            cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1.0)) / num_workers)
        # worker_set: the multi-agent one for PettingZoo envs (its fragments are MultiAgentSampleBatch)
        self.workers = worker_set(config, policy_factory, num_workers, num_cpus_per_worker=cpus)

    @property
    def actors(self) -> list[Any]:
        return self.workers.actors

    @property
    def restarts(self) -> int:
        return self.workers.restarts

    @property
    def policy_factory(self) -> WorkerPolicies:
        return self.workers.policy_factory

    # -- from the learner ------------------------------------------------------------------------
    def publish_weights(self, weights: Any, version: int) -> None:
        """New weights for every worker: one object in the store, a reference to each worker."""
        self.workers.publish_weights(weights, version)

    def sync_filter(self, state: RunningStats | None) -> None:
        self.workers.sync_filter(state)

    def poll(self, timeout: float) -> list[SampleBatch]:
        """Move finished fragments into the queue and return them; wait up to `timeout` when none is ready."""
        local = self.workers.local_worker
        if local is not None:
            if timeout > 0 and len(self.queue) < self.queue_size:
                self.queue.append(local.sample())
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
                self.deaths.delivered()
            except actor_died_errors() as error:
                self.deaths.died(error, "a fragment")
                self.in_flight = {r: p for r, p in self.in_flight.items() if p != position}
                self.workers.replace(position)
        self.queue.extend(arrived)
        self._request()
        return arrived

    def take(self, count: int) -> list[SampleBatch]:
        """The `count` oldest fragments, or none when fewer are queued."""
        if len(self.queue) < count:
            return []
        return [self.queue.popleft() for _ in range(count)]

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

    def stop(self) -> None:
        self.workers.stop()
        self.in_flight = {}
