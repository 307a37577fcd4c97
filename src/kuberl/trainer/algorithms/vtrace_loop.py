"""IMPALA's and APPO's learner loop, for one policy or several: what a `VTraceLearner` learns from, and when.

`VTraceLoop` is one policy's: the columns of the fragments it is given (one env's trajectory of
`fragmentLength` steps each: a single-agent run's envs, or a multi-agent policy's agents in them) gather side by
side, and every `trainBatchSize` env steps of them, rounded up to whole columns, become one train batch (a
single-agent batch is whole fragments wherever `trainBatchSize` is a multiple of a fragment's steps).
`bufferBatches` train batches wait in the learner; each update takes a random one, which leaves after
`batchReuse` updates. Each batch keeps the policy version that sampled each of its columns, for the lag.

`learn_for` runs one iteration of the algorithm over its loops (IMPALA's one, or one per trained policy): it
takes queued fragments while every loop has room for another batch (the rest wait in the bounded queue, which
holds the workers back), waits for sampling only when no loop has anything to learn from, updates each loop
once per pass, publishes the weights every `broadcastInterval` updates, and ends after `minIterationSeconds`
once something was learnt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from kuberl.api.hyperparams import APPOParams, IMPALAParams
from kuberl.trainer.algorithms.policy_loop import PolicyLoop
from kuberl.trainer.distributed.fragment_queue import FragmentQueue
from kuberl.trainer.learners.vtrace import VTraceLearner, appo_loss, impala_loss
from kuberl.trainer.learning.device import Bf16Setting, to_device
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.policy_value import PolicyHead, PolicyValueNet
from kuberl.trainer.sampling.rollout_worker import SampleBatch, trace_ends

if TYPE_CHECKING:
    from kuberl.trainer.algorithms.base import Algorithm

BATCH_KEYS = ("obs", "next_obs", "actions", "rewards", "terminateds", "truncateds", "valid", "logp")
PUBLISHED_KEPT = 10_000  # policy versions whose broadcast is remembered, for the lag in updates


@dataclass(eq=False)
class TrainBatch:
    tensors: dict[str, torch.Tensor]  # time-major [T, B, ...]
    versions: np.ndarray  # the policy version that sampled each column
    uses: int = 0


@dataclass(frozen=True)
class Columns:
    """Fragments' columns side by side, [T, width, ...] each, and the policy version that sampled each column."""

    data: dict[str, np.ndarray]
    versions: np.ndarray

    @classmethod
    def of(cls, fragment: SampleBatch) -> Columns:
        data = {key: fragment.data[key] for key in BATCH_KEYS}
        return cls(data, np.full(data["rewards"].shape[1], fragment.policy_version))

    @classmethod
    def joined(cls, parts: Sequence[Columns]) -> Columns:
        if len(parts) == 1:
            return parts[0]
        return cls({key: np.concatenate([p.data[key] for p in parts], axis=1) for key in BATCH_KEYS},
                   np.concatenate([p.versions for p in parts]))

    @property
    def length(self) -> int:
        return int(self.data["rewards"].shape[0])

    @property
    def width(self) -> int:
        return int(self.versions.size)

    def split(self, width: int) -> tuple[Columns, Columns]:
        """The first `width` columns, and the rest."""
        return (Columns({key: value[:, :width] for key, value in self.data.items()}, self.versions[:width]),
                Columns({key: value[:, width:] for key, value in self.data.items()}, self.versions[width:]))


def train_batch(columns: Columns, device: torch.device) -> TrainBatch:
    """The columns on the learner's device, with where each trace stops (once per batch, not per update)."""
    arrays = {**columns.data, "dones": trace_ends(columns.data)}
    return TrainBatch(to_device(arrays, device), columns.versions)


def vtrace_learner(spaces: tuple[gym.Space, gym.Space], params: IMPALAParams, device: torch.device,
                   bf16: Bf16Setting) -> VTraceLearner:
    """A policy-value network of these (observation, action) spaces and its learner: APPO's loss and target policy
    for APPO's hyperparameters, IMPALA's loss for IMPALA's."""
    model = PolicyValueNet(*spaces, EncoderSpec.from_params(params))
    if isinstance(params, APPOParams):
        return VTraceLearner(model, params, device, loss=appo_loss,
                             target_update_interval=params.target_update_interval, bf16=bf16)
    return VTraceLearner(model, params, device, loss=impala_loss, bf16=bf16)


@dataclass
class Tally:
    """One iteration of a loop: its updates' statistics summed, and the lag of every batch it learnt from."""

    updates_before: int
    sums: dict[str, float] = field(default_factory=dict)
    lags: list[int] = field(default_factory=list)  # in policy versions
    lag_updates: list[int] = field(default_factory=list)  # in learner updates


@dataclass
class Iteration:
    """What one `learn_for` sampled and waited."""

    fragments: list[Any] = field(default_factory=list)  # that arrived, in order
    seconds: float = 0.0
    waited: float = 0.0  # with nothing to learn from, waiting for a fragment
    depths: list[int] = field(default_factory=list)  # the queue's length at each pass


class VTraceLoop(PolicyLoop):
    learner: VTraceLearner

    def __init__(self, learner: VTraceLearner, rng: np.random.Generator):
        self.learner = learner
        self.params: IMPALAParams = learner.params
        self.rng = rng  # the algorithm's generator: its state is in every checkpoint
        self.pending: list[Columns] = []  # columns not yet in a train batch
        self.buffer: list[TrainBatch] = []
        self.published_at: dict[int, int] = {}  # policy version -> learner updates when it was broadcast
        self.tally = Tally(0)

    @property
    def actor(self) -> PolicyHead:
        return self.learner.model.policy

    @property
    def updates(self) -> int:
        return self.learner.updates

    @property
    def pending_width(self) -> int:
        return sum(part.width for part in self.pending)

    def batch_width(self) -> int:
        """The columns of a train batch: `trainBatchSize` env steps, rounded up to whole columns."""
        length = self.pending[0].length if self.pending else 1
        return max(1, -(-self.params.train_batch_size // length))

    @property
    def wants_more(self) -> bool:
        """Room in the buffer for a batch that the waiting columns cannot make yet."""
        return len(self.buffer) < self.params.buffer_batches and self.pending_width < self.batch_width()

    def add(self, fragment: SampleBatch) -> None:
        """A fragment (or a policy's part of one) to learn from; train batches of it while the buffer has room."""
        self.pending.append(Columns.of(fragment))
        self.fill()

    def fill(self) -> None:
        """Train batches of the waiting columns while the buffer has room for them."""
        width = self.batch_width()
        while len(self.buffer) < self.params.buffer_batches and self.pending_width >= width:
            batch, rest = Columns.joined(self.pending).split(width)
            self.buffer.append(train_batch(batch, self.learner.device))
            self.pending = [rest] if rest.width else []

    def step(self, policy_version: int) -> bool:
        """One update from a random buffered batch (none without one); True when the weights are due out."""
        if not self.buffer:
            return False
        batch = self.buffer[int(self.rng.integers(len(self.buffer)))]
        self.tally.lags.extend((policy_version - batch.versions).tolist())
        self.tally.lag_updates.extend(self.updates - self.published_at.get(int(v), 0) for v in batch.versions)
        for key, value in self.learner.update(batch.tensors).items():
            self.tally.sums[key] = self.tally.sums.get(key, 0.0) + value
        batch.uses += 1
        if batch.uses >= self.params.batch_reuse:
            self.buffer.remove(batch)
        return self.updates % self.params.broadcast_interval == 0

    def published(self, version: int) -> None:
        """Weights of `version` went out: note the learner's updates then, to count each batch's lag in updates."""
        self.published_at[version] = self.updates
        for old in [v for v in self.published_at if v < version - PUBLISHED_KEPT]:
            del self.published_at[old]

    def statistics(self, iteration: Iteration) -> dict[str, float] | None:
        """The iteration's figures (None where it learnt nothing): the updates' mean statistics, their count,
        the time waited for sampling, the buffer, and the lag of what they learnt from."""
        tally = self.tally
        updates = self.updates - tally.updates_before
        if not updates:
            return None
        stats = {key: value / updates for key, value in tally.sums.items()}
        seconds = iteration.seconds
        stats.update(
            updates=updates, updatesTotal=self.updates, updatesPerSecond=updates / seconds if seconds > 0 else 0.0,
            lr=self.learner.optimizer.param_groups[0]["lr"], waitSeconds=iteration.waited,
            bufferBatches=len(self.buffer),
            policyLagMean=float(np.mean(tally.lags)), policyLagMax=int(np.max(tally.lags)),
            policyLagUpdatesMean=float(np.mean(tally.lag_updates)), policyLagUpdatesMax=int(np.max(tally.lag_updates)),
        )
        return stats

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            actions, _ = self.actor.sample(torch.as_tensor(obs, device=self.learner.device), explore)
        return actions.cpu().numpy()

    def load_state_files(self, files: dict[str, bytes]) -> None:
        super().load_state_files(files)
        self.buffer.clear()  # batches of the run before: their lag no longer means anything
        self.pending.clear()


# What a fragment from the queue gives each loop: (loop, the part of the fragment it learns from).
Route = Callable[[Any], list[tuple[VTraceLoop, SampleBatch]]]


def _take(sampler: FragmentQueue, loops: Sequence[VTraceLoop], route: Route) -> None:
    """Queued fragments to the loops while every one has room for a train batch its waiting columns cannot make."""
    for loop in loops:
        loop.fill()
    while loops and all(loop.wants_more for loop in loops):
        fragments = sampler.take(1)
        if not fragments:
            return
        for loop, part in route(fragments[0]):
            loop.add(part)


def learn_for(algorithm: Algorithm, loops: Sequence[VTraceLoop], route: Route, seconds: float) -> Iteration:
    """One iteration of asynchronous learning: at least `seconds`, and until some loop has learnt."""
    sampler = algorithm.sampler
    assert isinstance(sampler, FragmentQueue)
    for loop in loops:
        loop.tally = Tally(loop.updates)
    started = perf_counter()
    deadline = started + seconds
    before = sum(loop.updates for loop in loops)
    iteration = Iteration()
    while True:
        _take(sampler, loops, route)
        idle = not any(loop.buffer for loop in loops)
        waiting = perf_counter()
        arrived = sampler.poll(timeout=0.05 if idle else 0.0)
        if idle:
            iteration.waited += perf_counter() - waiting
        for fragment in arrived:
            algorithm.obs_filter.apply_delta(fragment.filter_delta)
            algorithm.record_episodes(fragment.episodes)
        iteration.fragments.extend(arrived)
        iteration.depths.append(len(sampler.queue))
        _take(sampler, loops, route)
        due = [loop.step(algorithm.policy_version) for loop in loops]
        if any(due):
            algorithm.sync_weights()
        if perf_counter() >= deadline and (not loops or sum(loop.updates for loop in loops) > before):
            break
    iteration.seconds = perf_counter() - started
    return iteration


__all__ = ["BATCH_KEYS", "Iteration", "TrainBatch", "VTraceLoop", "learn_for", "train_batch", "vtrace_learner"]
