"""Replay buffers over preallocated numpy arrays: proportional prioritized (sum-tree) and uniform.

Both buffers store either any dict of arrays that share a leading batch dimension (the n-step
transitions of `kuberl.trainer.replay.nstep`), or, given `frames_per_transition`, the compact
`FrameTransitions` of `kuberl.trainer.replay.frames` (`storage.FrameStorage`). They share one API:

    buffer.add(batch, priorities=None)
    sample = buffer.sample(batch_size, beta=...)   # dict: the fields, plus "ids" and "weights"
    buffer.update_priorities(sample["ids"], new_td_errors)

Sampled transitions are named by a global id (the add counter when they were
written), not by their slot: a priority update for a slot that has since been
overwritten is dropped instead of landing on the wrong transition.
"""

from __future__ import annotations

import numpy as np

from kuberl.trainer.iteration_result import Scalar
from kuberl.trainer.replay.frames import FrameTransitions
from kuberl.trainer.replay.rings import ArrayStorage, Batch, FrameStorage, batch_length
from kuberl.trainer.replay.segment_tree import MinTree, SumTree

__all__ = ["Batch", "PrioritizedReplayBuffer", "UniformReplayBuffer", "make_replay_buffer", "split_capacity"]


class _ReplayBuffer:
    """What both buffers share: preallocated storage, a seeded generator, and their sizes."""

    def __init__(self, capacity: int, seed: int | None, frames_per_transition: float | None):
        self.storage = ArrayStorage(capacity) if frames_per_transition is None else FrameStorage(
            capacity, frames_per_transition)
        self.samples = 0
        self.rng = np.random.default_rng(seed)

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    def __len__(self) -> int:
        return len(self.storage)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays allocated (storage and priority trees): the first add allocates the storage."""
        return self.storage.nbytes


class PrioritizedReplayBuffer(_ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016): P(i) = p_i^alpha / sum_k p_k^alpha.

    Priorities come in as |TD error|; the tree holds (|delta| + eps)^alpha. Importance weights
    (N * P(i))^-beta are divided by the largest possible one, (N * P_min)^-beta, so they lie in (0, 1].
    """

    prioritized = True

    def __init__(self, capacity: int, *, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 seed: int | None = None, frames_per_transition: float | None = None):
        super().__init__(capacity, seed, frames_per_transition)
        self.sum_tree = SumTree(capacity)
        self.min_tree = MinTree(capacity)
        self.alpha = alpha
        self.beta = beta
        self.eps = eps
        self.max_priority = 1.0  # new transitions without a priority get the largest seen so far
        self.dropped_updates = 0

    def _tree_priority(self, td_errors: np.ndarray) -> np.ndarray:
        return (np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps) ** self.alpha

    def add(self, batch: Batch | FrameTransitions, priorities: np.ndarray | None = None) -> None:
        """Add transitions; `priorities` are |TD errors| (the worker's own estimate), else the max so far."""
        n = batch_length(batch)
        if priorities is None:
            tree_p = np.full(n, self.max_priority**self.alpha)
        else:
            priorities = np.asarray(priorities, dtype=np.float64)
            if priorities.shape != (n,):
                raise ValueError(f"priorities must have shape ({n},), got {priorities.shape}")
            self.max_priority = max(self.max_priority, float(np.abs(priorities).max(initial=0.0)) + self.eps)
            tree_p = self._tree_priority(priorities)
        slots, stale = self.storage.write(batch)
        tree_p = tree_p[n - len(slots) :]
        self.sum_tree.update(slots, tree_p)
        self.min_tree.update(slots, tree_p)
        # Transitions whose frames were overwritten leave the trees: they are never sampled again.
        self.sum_tree.update(stale, np.zeros(len(stale)))
        self.min_tree.update(stale, np.full(len(stale), np.inf))

    def sample(self, batch_size: int, beta: float | None = None) -> Batch:
        """Stratified proportional sample: one draw from each of `batch_size` equal slices of the total."""
        size = len(self)
        if size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        beta = self.beta if beta is None else beta
        total = self.sum_tree.total
        bounds = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        slots = self.sum_tree.find_prefix_sum(np.minimum(bounds, np.nextafter(total, 0)))
        probs = self.sum_tree[slots] / total
        # A zero priority (possible only with eps 0) has no finite weight: normalise by the sample instead.
        p_min = self.min_tree.min / total if self.min_tree.min > 0 else float(probs.min())
        out = self.storage.read(slots)
        out["weights"] = importance_weights(probs, p_min, beta)
        self.samples += batch_size
        return out

    def update_priorities(self, ids: np.ndarray, td_errors: np.ndarray) -> int:
        """Set new priorities from |TD errors|; returns how many were dropped (slot overwritten since)."""
        slots, live = self.storage.live_slots(ids)
        td_errors = np.asarray(td_errors, dtype=np.float64)
        if td_errors.shape != slots.shape:
            raise ValueError(f"td_errors shape {td_errors.shape} does not match ids shape {slots.shape}")
        if live.any():
            self.max_priority = max(self.max_priority, float(np.abs(td_errors[live]).max()) + self.eps)
            tree_p = self._tree_priority(td_errors[live])
            self.sum_tree.update(slots[live], tree_p)
            self.min_tree.update(slots[live], tree_p)
        dropped = int((~live).sum())
        self.dropped_updates += dropped
        return dropped

    def stats(self) -> dict[str, Scalar]:
        size = len(self)
        return {
            "size": size,
            "capacity": self.capacity,
            "adds": self.storage.adds,
            "samples": self.samples,
            "meanPriority": self.sum_tree.total / size if size else 0.0,
            "droppedPriorityUpdates": self.dropped_updates,
        }

    @property
    def nbytes(self) -> int:
        return self.storage.nbytes + self.sum_tree.nodes.nbytes + self.min_tree.nodes.nbytes


class UniformReplayBuffer(_ReplayBuffer):
    """Uniform replay with the prioritized buffer's API: priorities are ignored, weights are all 1."""

    prioritized = False

    def __init__(self, capacity: int, *, seed: int | None = None, frames_per_transition: float | None = None,
                 **_unused: float):
        super().__init__(capacity, seed, frames_per_transition)

    def add(self, batch: Batch | FrameTransitions, priorities: np.ndarray | None = None) -> None:
        self.storage.write(batch)

    def sample(self, batch_size: int, beta: float | None = None) -> Batch:
        size = len(self)
        if size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        ids = self.rng.integers(self.storage.oldest, self.storage.adds, batch_size)
        out = self.storage.read(ids % self.capacity)
        out["weights"] = np.ones(batch_size, dtype=np.float32)
        self.samples += batch_size
        return out

    def update_priorities(self, ids: np.ndarray, td_errors: np.ndarray) -> int:
        return 0

    def stats(self) -> dict[str, Scalar]:
        return {"size": len(self), "capacity": self.capacity, "adds": self.storage.adds, "samples": self.samples}


def importance_weights(probs: np.ndarray, p_min: float, beta: float) -> np.ndarray:
    """w_i = (N P(i))^-beta / (N P_min)^-beta = (P(i) / P_min)^-beta, in (0, 1]; float32 for the loss."""
    probs = np.asarray(probs, dtype=np.float64)
    return ((probs / p_min) ** (-beta)).astype(np.float32)


def make_replay_buffer(
    capacity: int, *, prioritized: bool, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
    seed: int | None = None, frames_per_transition: float | None = None,
) -> PrioritizedReplayBuffer | UniformReplayBuffer:
    """The buffer `spec.replay.prioritized` asks for; compact (frames) when `frames_per_transition` is given."""
    if prioritized:
        return PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, eps=eps, seed=seed,
                                       frames_per_transition=frames_per_transition)
    return UniformReplayBuffer(capacity, seed=seed, frames_per_transition=frames_per_transition)


def split_capacity(capacity: int, shards: int) -> list[int]:
    """Capacity per shard: as even as possible, summing to `capacity`."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    base, extra = divmod(capacity, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]
