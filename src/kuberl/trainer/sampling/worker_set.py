"""N rollout workers: in-process when N is 0 (the fast path), else Ray actors sampled in parallel
that get weights through the object store and are replaced when they die."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Protocol

from kuberl.trainer.distributed.errors import actor_died_errors
from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.rollout_worker import RolloutWorker, SampleBatch, WorkerConfig, WorkerPolicies

log = logging.getLogger(__name__)


class Worker(Protocol):
    """What a WorkerSet runs in-process or as each actor: a `RolloutWorker`, or a multi-agent run's own (which
    builds its policies from a `MultiAgentPolicies` and samples a `MultiAgentSampleBatch`)."""

    def __init__(self, config: WorkerConfig, policies: Any, worker_index: int = 0) -> None: ...

    def sample(self) -> Any: ...

    def set_weights(self, weights: Any, policy_version: int) -> None: ...

    def set_filter(self, state: RunningStats | None) -> None: ...

    def configure_policy(self, settings: PolicySettings) -> None: ...

    def stop(self) -> None: ...


class WorkerSet:
    """N rollout workers: in-process when N is 0, else Ray actors sampled in parallel (a `Sampler`)."""

    worker_class: type[Worker] = RolloutWorker  # what runs in-process or in each actor (multi-agent: its own worker)

    def __init__(self, config: WorkerConfig, policy_factory: WorkerPolicies, num_workers: int,
                 *, num_cpus_per_worker: float = 1.0, max_sample_attempts: int = 3):
        self.config = config
        self.policy_factory = policy_factory
        self.num_workers = num_workers
        self.num_cpus_per_worker = num_cpus_per_worker
        self.max_sample_attempts = max_sample_attempts
        self.restarts = 0
        self.local_worker: Worker | None = None
        self.actors: list[Any] = []
        self._weights: tuple[Any, int] | None = None  # (object ref or weights, version) for replacements
        self._filter_state: RunningStats | None = None
        self._policy_settings = PolicySettings()  # every setting sent so far, for replacements
        if num_workers == 0:
            self.local_worker = self.worker_class(config, policy_factory, worker_index=0)
        else:
            from kuberl.trainer.distributed.ray_runtime import init_ray

            init_ray()
            from kuberl.trainer.distributed.placement import cluster_rollout_slots

            slots = cluster_rollout_slots(num_cpus_per_worker)  # one look at the cluster for all of them
            self.actors = [self._new_actor(i + 1, slots) for i in range(num_workers)]

    def _new_actor(self, worker_index: int, slots: list[str] | None = None) -> Any:
        """A worker actor; `slots`: the cluster's rollout slots, looked up again where not given (a replacement:
        nodes may have come or gone since)."""
        import ray

        from kuberl.trainer.distributed.placement import rollout_actor_strategy

        # The worker pods' nodes first, then all of them (docs/architecture.md, "Where the actors run").
        strategy = rollout_actor_strategy(worker_index, self.num_cpus_per_worker, slots)
        actor_class = ray.remote(self.worker_class).options(num_cpus=self.num_cpus_per_worker, max_restarts=0,
                                                        scheduling_strategy=strategy, **ACTOR_OPTIONS)
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
            actor.configure_policy.remote(self._policy_settings)
        self.actors[position] = actor
        self.restarts += 1
        log.warning("rollout worker %d died; replaced it (%d replacements so far)", position + 1, self.restarts)

    def sample(self) -> list[SampleBatch]:
        """One batch from every worker that answers; dead workers are replaced and the others' batches kept."""
        if self.local_worker is not None:
            return [self.local_worker.sample()]
        import ray

        died = actor_died_errors()
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

    def publish_weights(self, weights: Any, policy_version: int) -> None:
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

    def configure_policies(self, settings: PolicySettings) -> None:
        self._policy_settings = self._policy_settings.updated(settings)
        if self.local_worker is not None:
            self.local_worker.configure_policy(settings)
            return
        for actor in self.actors:
            actor.configure_policy.remote(settings)

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
