"""The rollout worker actor of the replay-shard topology: samples into replay shards directly and picks up
weights when they are there.

It acts with its algorithm's sampling policy (Ape-X: epsilon-greedy with its own epsilon; SAC: the squashed
Gaussian, uniform until learning starts), turns each fragment into n-step transitions, with initial
priorities where the policy can give them (`Priorities`: Ape-X's own TD errors; without, the shard gives new
transitions its largest priority), and adds them in the compact form (frames once, in their own dtype:
`kuberl.trainer.replay.frames`) to the shards round robin, with at most MAX_ADDS_IN_FLIGHT adds outstanding.
Between fragments it asks the learner for newer weights without waiting for the answer.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kuberl.trainer.distributed.errors import actor_died_errors
from kuberl.trainer.distributed.placement import Placement, current_placement, placement_fields
from kuberl.trainer.learning.device import configure_cpu_threads
from kuberl.trainer.replay.frames import NStepRows
from kuberl.trainer.replay.nstep import compact_transitions
from kuberl.trainer.sampling.episode_records import EpisodeRecord
from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.rollout_worker import PolicyFactory, RolloutWorker, SampleBatch, WorkerConfig

# (policy, rollout batch, its n-step rows) -> |TD errors| as initial priorities; module-level, so it pickles.
Priorities = Callable[[Any, SampleBatch, NStepRows], np.ndarray]

MAX_ADDS_IN_FLIGHT = 2  # per worker: bounds the object store when a shard falls behind


@dataclass(frozen=True)
class TransitionSettings:
    """How a worker turns its fragments into what it adds to replay: n-step returns discounted by gamma, frames
    stored once where observations are stacks of `stack_depth`, and initial priorities where the algorithm
    can score its own transitions (None: the shard gives them its largest priority)."""

    gamma: float
    n_step: int
    stack_depth: int = 1
    priorities: Priorities | None = None


@dataclass(frozen=True)
class WorkerReport:
    """What a worker's `run` call reports to the driver (no transitions): its env steps, the bytes and
    transitions it sent, its seconds, the episodes it finished and its observation filter's statistics since
    the driver's state (`filter_delta`, for the driver to merge); and its state: the weights version it acts
    with, the weight updates and lost adds of its life so far, the settings its policy has, and its Ray node."""

    worker: int
    env_steps: int
    sent_bytes: int
    sent_transitions: int
    seconds: float
    episodes: list[EpisodeRecord]
    policy_version: int
    weight_updates: int
    shard_errors: int
    settings: PolicySettings
    placement: Placement | None
    filter_delta: RunningStats | None = None

    def after(self, earlier: WorkerReport) -> WorkerReport:
        """This report and an `earlier` one of the same worker in one iteration as one: env steps, bytes,
        transitions, seconds and episodes added up, the rest (the worker's state, the filter delta) this one's."""
        return replace(self, env_steps=earlier.env_steps + self.env_steps,
                       sent_bytes=earlier.sent_bytes + self.sent_bytes,
                       sent_transitions=earlier.sent_transitions + self.sent_transitions,
                       seconds=earlier.seconds + self.seconds, episodes=[*earlier.episodes, *self.episodes])

    def to_json(self, *, env_steps_per_second: float, episode_return_mean: float | None) -> dict[str, Any]:
        """The worker's entry of a results line's `workers` (`worker_N`): the iteration's env steps and seconds
        (`after` adds up its reports), its state, the driver's figures for it and its Ray node (node None
        where it reported none)."""
        return {
            "envSteps": self.env_steps,
            "seconds": self.seconds,
            "policyVersion": self.policy_version,
            "weightUpdates": self.weight_updates,
            "shardErrors": self.shard_errors,
            **self.settings.kwargs(),
            "envStepsPerSecond": env_steps_per_second,
            **(placement_fields(self.placement) or {"node": None}),
            "episodeReturnMean": episode_return_mean,
        }


class ShardRolloutWorker:
    """A rollout worker that feeds replay shards directly and picks up weights when they are there."""

    def __init__(self, config: WorkerConfig, policy_factory: PolicyFactory, worker_index: int,
                 policy_settings: PolicySettings, *, transitions: TransitionSettings, learner: Any):
        configure_cpu_threads()
        self.worker = RolloutWorker(config, policy_factory, worker_index)
        self.policy_settings = PolicySettings()
        self._configure(policy_settings)
        self.priorities = transitions.priorities
        self.gamma = transitions.gamma
        self.n_step = transitions.n_step
        self.stack_depth = transitions.stack_depth
        self.learner = learner
        self.weights_request: Any = None
        self.weight_updates = 0
        self.next_shard = worker_index
        self.adds_in_flight: deque[Any] = deque()
        self.shard_errors = 0
        self.placement = current_placement()  # its Ray node, for its whole life

    def ready(self) -> bool:
        """Answered once the actor is built: what `ShardWorkerPool.wait_until_up` waits for."""
        return True

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

    def _configure(self, settings: PolicySettings) -> None:
        """Pass the settings that changed to the policy's `configure` (epsilon; uniform until learning starts)."""
        changed = settings.changed_from(self.policy_settings)
        if changed:
            self.worker.configure_policy(changed)
            self.policy_settings = self.policy_settings.updated(changed)

    def _wait_for_adds(self, limit: int) -> None:
        import ray

        while len(self.adds_in_flight) > limit:
            try:
                ray.get(self.adds_in_flight.popleft())
            except actor_died_errors():
                self.shard_errors += 1  # those transitions are lost with the shard; the driver replaces it

    def run(self, fragments: int, shards: list[Any], filter_state: RunningStats | None = None,
            policy_settings: PolicySettings | None = None) -> WorkerReport:
        """Sample `fragments` fragments into the shards; returns a small report (no transitions).

        `filter_state` is the driver's master observation filter (observation_filter: mean_std);
        the report carries the statistics this worker gathered since, for the driver to merge.
        `policy_settings` go to the policy's `configure` first (SAC: uniform actions until learning starts).
        """
        if filter_state is not None:
            self.worker.set_filter(filter_state)
        if policy_settings is not None:
            self._configure(policy_settings)
        started = time.perf_counter()
        env_steps = 0
        sent_bytes = sent = 0
        episodes: list[EpisodeRecord] = []
        filter_delta: RunningStats | None = None
        for _ in range(fragments):
            self._poll_weights()
            batch = self.worker.sample()
            if batch.filter_delta is not None:
                if filter_delta is None:
                    filter_delta = batch.filter_delta
                else:
                    filter_delta.merge(batch.filter_delta)
            transitions, rows = compact_transitions(batch, gamma=self.gamma, n_step=self.n_step,
                                                    stack_depth=self.stack_depth)
            priorities = None if self.priorities is None else self.priorities(self.worker.policy, batch, rows)
            shard = shards[self.next_shard % len(shards)]
            self.next_shard += 1
            self._wait_for_adds(MAX_ADDS_IN_FLIGHT - 1)
            self.adds_in_flight.append(shard.add.remote(transitions, priorities))
            sent_bytes += transitions.nbytes + (0 if priorities is None else priorities.nbytes)
            sent += len(transitions)
            env_steps += batch.env_steps
            episodes.extend(batch.episodes)
        return WorkerReport(
            self.worker.worker_index, env_steps, sent_bytes, sent, time.perf_counter() - started, episodes,
            policy_version=self.worker.policy_version, weight_updates=self.weight_updates,
            shard_errors=self.shard_errors, settings=self.policy_settings, placement=self.placement,
            filter_delta=filter_delta,
        )

    def stop(self) -> None:
        self.worker.stop()
