"""Segment trees over numpy arrays: sums and minima of priorities, updated and queried in batches."""

from __future__ import annotations

import numpy as np


def tree_leaves(capacity: int) -> int:
    """Leaves of a complete binary tree with room for `capacity` entries (a power of two)."""
    return 1 << max(0, int(capacity - 1).bit_length())


class SegmentTree:
    """A complete binary tree in one array: node i has children 2i and 2i+1, leaves at [L, 2L).

    Updates are vectorised: set the leaves, then recompute the touched parents one level at a time.
    """

    def __init__(self, capacity: int, neutral: float):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.leaves = tree_leaves(capacity)
        self.neutral = neutral
        self.nodes = np.full(2 * self.leaves, neutral, dtype=np.float64)

    def _combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves `indices` to `values` (the last write wins for repeated indices)."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise IndexError(f"leaf index out of range [0, {self.capacity})")
        nodes = indices + self.leaves
        self.nodes[nodes] = np.asarray(values, dtype=np.float64)
        parents = np.unique(nodes // 2)
        while parents.size and parents[0] >= 1:
            self.nodes[parents] = self._combine(self.nodes[2 * parents], self.nodes[2 * parents + 1])
            if parents[0] == 1:
                break
            parents = np.unique(parents // 2)

    def __getitem__(self, indices: np.ndarray | int) -> np.ndarray:
        return self.nodes[np.asarray(indices, dtype=np.int64) + self.leaves]

    @property
    def root(self) -> float:
        return float(self.nodes[1])


class SumTree(SegmentTree):
    """Sums of priorities: O(log n) proportional sampling by prefix sums."""

    def __init__(self, capacity: int):
        super().__init__(capacity, 0.0)

    def _combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return left + right

    @property
    def total(self) -> float:
        return self.root

    def find_prefix_sum(self, targets: np.ndarray) -> np.ndarray:
        """For each target in [0, total): the leaf i with sum(leaves[:i]) <= target < sum(leaves[:i+1]).

        All targets descend the tree together, one level per step. A subtree whose sum is zero is
        never entered, so float round-off near `total` cannot pick an empty slot.
        """
        values = np.array(targets, dtype=np.float64, copy=True)
        nodes = np.ones(values.shape, dtype=np.int64)
        while nodes.size and nodes[0] < self.leaves:
            left = 2 * nodes
            left_sum = self.nodes[left]
            go_right = (values >= left_sum) & (self.nodes[left + 1] > 0)
            go_right |= left_sum <= 0
            values -= np.where(go_right, left_sum, 0.0)
            nodes = left + go_right
        return nodes - self.leaves


class MinTree(SegmentTree):
    """Minimum priority, for the largest importance weight."""

    def __init__(self, capacity: int):
        super().__init__(capacity, np.inf)

    def _combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return np.minimum(left, right)

    @property
    def min(self) -> float:
        return self.root
