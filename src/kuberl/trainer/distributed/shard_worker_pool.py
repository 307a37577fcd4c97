"""The replay-shard topology's `Sampler`: rollout worker actors that add to the replay shards themselves.

The driver keeps one `run` call in flight per worker (`dispatch`); each call samples some fragments, adds
their transitions to the shards and comes back with a small report (env steps, bytes sent, episodes, the
filter's delta), never the transitions. A worker that dies is replaced (`reports`), unless the workers keep
dying without a report in between (`DeathsInARow`). Weights do not go
through here: between fragments each worker asks the learner actor for newer weights without waiting.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kuberl.trainer.distributed.errors import DeathsInARow, actor_died_errors
from kuberl.trainer.distributed.shard_worker import WorkerReport
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.rollout_worker import PolicyFactory

log = logging.getLogger(__name__)

RunArguments = Callable[[int, RunningStats | None], tuple[Any, ...]]  # (position, filter) -> run()'s arguments

# How long the first workers may take to start: a new process on its node that imports torch and makes its
# envs, on a worker pod whose Ray node may have just joined. Past it the run goes on with those that are up.
WORKER_START_TIMEOUT_S = 300.0


class ShardWorkerPool:
    def __init__(self, start_actor: Callable[[int, list[str] | None], Any], count: int,
                 policy_factory: PolicyFactory, slots: list[str] | None = None):
        # (position, the cluster's rollout slots or None to look them up) -> a new ShardRolloutWorker actor;
        # the first ones share one look at the cluster, a replacement looks again (nodes come and go).
        self.start_actor = start_actor
        self._policy_factory = policy_factory
        self.actors = [start_actor(position, slots) for position in range(count)]
        self.in_flight: dict[Any, int] = {}  # run call -> worker position
        self._restarts = 0
        self.deaths = DeathsInARow(count)  # since a run call last came back
        self.filter_state: RunningStats | None = None

    @property
    def policy_factory(self) -> PolicyFactory:
        return self._policy_factory

    @property
    def restarts(self) -> int:
        return self._restarts

    def wait_until_up(self, timeout: float = WORKER_START_TIMEOUT_S) -> list[int]:
        """Wait until every worker has started (its actor built, envs made), within `timeout`; the positions of
        those that have not, named in a warning.

        As RLlib's env-runner group does before its first iteration: sampling is asynchronous, so without this
        a worker that starts slowly (a cold process on a busy worker pod) can miss a short run altogether while
        the others do its share. A worker whose start failed counts as up: the first `reports` replaces it.
        """
        import ray

        pending = {actor.ready.remote(): position for position, actor in enumerate(self.actors)}
        _, late = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
        late_positions = sorted(pending[ref] for ref in late)
        if late_positions:
            log.warning("rollout workers %s had not started after %.0f s; sampling goes on with the others",
                        ", ".join(str(position + 1) for position in late_positions), timeout)
        return late_positions

    def publish_weights(self, weights: Any, version: int) -> None:
        """Nothing to send: the workers fetch the learner actor's newest weights themselves."""

    def sync_filter(self, state: RunningStats | None) -> None:
        self.filter_state = state  # goes out with each worker's next run call

    def dispatch(self, run_arguments: RunArguments) -> None:
        """Start a run call on every worker that has none in flight."""
        busy = set(self.in_flight.values())
        for position, actor in enumerate(self.actors):
            if position not in busy:
                self.in_flight[actor.run.remote(*run_arguments(position, self.filter_state))] = position

    def reports(self, timeout: float) -> list[WorkerReport]:
        """The reports of run calls that finished within `timeout` (at least one, unless none did)."""
        import ray

        if not self.in_flight:
            return []
        ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=timeout)
        reports = []
        for ref in ready:
            position = self.in_flight.pop(ref)
            try:
                reports.append(ray.get(ref))
                self.deaths.delivered()
            except actor_died_errors() as error:
                self.deaths.died(error, "a report")
                self.replace(position)
        return reports

    def replace(self, position: int) -> None:
        import ray

        with contextlib.suppress(Exception):  # it is already gone
            ray.kill(self.actors[position], no_restart=True)
        self.actors[position] = self.start_actor(position, None)
        self._restarts += 1
        log.warning("rollout worker %d died; replaced it (%d so far)", position + 1, self._restarts)

    def stop(self) -> None:
        import ray

        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self.actors, self.in_flight = [], {}


__all__ = ["ShardWorkerPool"]
