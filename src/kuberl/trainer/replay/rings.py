"""Replay rings: preallocated arrays that the buffers (`buffers.py`) sample from.

- `ArrayStorage` keeps any dict of arrays row by row (the plain form).
- `FrameStorage` keeps `FrameTransitions` (`frames.py`): a ring of frames in their own dtype and a
  ring of transitions that point into it. Observations are rebuilt when sampled.

Both name transitions by a global id (the add counter when they were written). The live ones are
the ids in [oldest, adds): `write` returns the slots it filled and the slots of transitions that
are no longer valid (overwritten frames), which a prioritized buffer must never sample.
"""

from __future__ import annotations

import math

import numpy as np

from kuberl.trainer.replay.frames import FrameTransitions

Batch = dict[str, np.ndarray]  # named fields sharing a leading batch dimension
NO_SLOTS = np.empty(0, dtype=np.int64)


def batch_length(batch: Batch | FrameTransitions) -> int:
    if isinstance(batch, FrameTransitions):
        return len(batch)
    lengths = {len(v) for v in batch.values()}
    if len(lengths) != 1:
        raise ValueError(f"batch fields have different lengths: {sorted(lengths)}")
    return lengths.pop()


class ArrayStorage:
    """A ring of preallocated arrays, one per field, allocated on the first add."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.fields: Batch = {}
        self.ids = np.full(capacity, -1, dtype=np.int64)  # global id of what each slot holds
        self.adds = 0  # transitions ever added; the next one gets this id

    @property
    def oldest(self) -> int:
        return max(0, self.adds - self.capacity)

    def __len__(self) -> int:
        return self.adds - self.oldest

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + sum(v.nbytes for v in self.fields.values())

    def write(self, batch: Batch | FrameTransitions) -> tuple[np.ndarray, np.ndarray]:
        """Store a batch: (the slots it went to, slots gone stale: none here). Only the newest `capacity` rows are kept."""
        if isinstance(batch, FrameTransitions):
            raise ValueError("an array storage stores dicts of arrays, not FrameTransitions")
        return self._write_rows(batch), NO_SLOTS

    def _write_rows(self, batch: Batch) -> np.ndarray:
        """The slots the batch's rows went to."""
        n = batch_length(batch)
        if not self.fields:
            self.fields = {
                k: np.zeros((self.capacity, *np.shape(v)[1:]), dtype=np.asarray(v).dtype) for k, v in batch.items()
            }
        elif batch.keys() != self.fields.keys():
            raise ValueError(f"batch fields {sorted(batch)} differ from the buffer's {sorted(self.fields)}")
        ids = np.arange(self.adds, self.adds + n, dtype=np.int64)
        keep = slice(max(0, n - self.capacity), n)
        slots = ids[keep] % self.capacity
        for key, value in batch.items():
            self.fields[key][slots] = np.asarray(value)[keep]
        self.ids[slots] = ids[keep]
        self.adds += n
        return slots

    def read(self, slots: np.ndarray) -> Batch:
        out = {k: v[slots] for k, v in self.fields.items()}
        out["ids"] = self.ids[slots]
        return out

    def live_slots(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots, mask): the slots of `ids` and which of them still hold that transition."""
        ids = np.asarray(ids, dtype=np.int64)
        slots = ids % self.capacity
        return slots, (ids >= self.oldest) & (self.ids[slots] == ids)


class FrameStorage(ArrayStorage):
    """Transitions as frame indices into a ring of frames sized `frames_per_transition` x capacity.

    Frames are written in order and every transition's frames lie at or after its first obs
    frame, which grows with the transition id: when the frame ring overwrites frames, the
    transitions that used them are the oldest ones, and `oldest` moves past them.
    """

    def __init__(self, capacity: int, frames_per_transition: float):
        super().__init__(capacity)
        if frames_per_transition < 1:
            raise ValueError(f"frames_per_transition must be >= 1, got {frames_per_transition}")
        self.frame_capacity = math.ceil(capacity * frames_per_transition)
        self.frames: np.ndarray | None = None
        self.frames_written = 0
        self.obs_shape: tuple[int, ...] = ()
        self._oldest = 0

    @property
    def oldest(self) -> int:
        return self._oldest

    @property
    def nbytes(self) -> int:
        return super().nbytes + (self.frames.nbytes if self.frames is not None else 0)

    def _allocate(self, batch: FrameTransitions) -> None:
        c, k = self.capacity, batch.stack_depth
        self.frames = np.zeros((self.frame_capacity, *batch.frames.shape[1:]), dtype=batch.frames.dtype)
        self.obs_shape = batch.obs_shape
        self.fields = {
            "obs_frames": np.zeros((c, k), dtype=np.int64), "next_frames": np.zeros((c, k), dtype=np.int64),
            "action": np.zeros((c, *batch.action.shape[1:]), dtype=batch.action.dtype),
            "reward": np.zeros(c, dtype=np.float32), "discount": np.zeros(c, dtype=np.float32),
        }

    def _check(self, batch: FrameTransitions) -> None:
        assert self.frames is not None
        theirs = (batch.frames.shape[1:], batch.frames.dtype, batch.obs_shape, batch.stack_depth)
        ours = (self.frames.shape[1:], self.frames.dtype, self.obs_shape, self.fields["obs_frames"].shape[1])
        if theirs != ours:
            raise ValueError(f"frames (shape, dtype, obs shape, stack) {theirs} differ from the buffer's {ours}")

    def write(self, batch: Batch | FrameTransitions) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(batch, FrameTransitions):
            raise ValueError(f"a frame storage stores FrameTransitions, not {type(batch).__name__}")
        if self.frames is None:
            self._allocate(batch)
        self._check(batch)
        assert self.frames is not None
        first_frame, m, f = self.frames_written, len(batch.frames), self.frame_capacity
        kept = min(m, f)  # a fragment larger than the ring keeps its newest frames
        self.frames[np.arange(first_frame + m - kept, first_frame + m) % f] = batch.frames[m - kept:]
        self.frames_written += m
        rows = {
            "obs_frames": batch.obs_frames.astype(np.int64) + first_frame,
            "next_frames": batch.next_frames.astype(np.int64) + first_frame,
            "action": batch.action, "reward": batch.reward, "discount": batch.discount,
        }
        slots = self._write_rows(rows)
        return slots, self._retire_stale()

    def _retire_stale(self) -> np.ndarray:
        """Move `oldest` past transitions whose frames were overwritten; their slots come back."""
        floor = self.frames_written - self.frame_capacity  # frames with smaller ids are gone
        start = max(self._oldest, self.adds - self.capacity)
        first_frames = self.fields["obs_frames"][:, 0]
        low, high = start, self.adds  # first_frames is sorted by id: bisect for the first live one
        while low < high:
            mid = (low + high) // 2
            if first_frames[mid % self.capacity] < floor:
                low = mid + 1
            else:
                high = mid
        self._oldest = low
        return np.arange(start, low, dtype=np.int64) % self.capacity

    def read(self, slots: np.ndarray) -> Batch:
        assert self.frames is not None
        n, f = len(slots), self.frame_capacity
        return {
            "obs": self.frames[self.fields["obs_frames"][slots] % f].reshape(n, *self.obs_shape),
            "action": self.fields["action"][slots],
            "reward": self.fields["reward"][slots],
            "next_obs": self.frames[self.fields["next_frames"][slots] % f].reshape(n, *self.obs_shape),
            "discount": self.fields["discount"][slots],
            "ids": self.ids[slots],
        }
