"""What replay memory costs, from the env's observation space alone (pure functions).

A stored transition costs its share of the frame ring (`frames_per_transition` frames: one new
frame per step, plus what every fragment repeats and what episode ends add), its frame indices,
action, n-step reward and discount, its id, and with prioritized replay two segment-tree leaves
(rounded up to a power of two). `FrameStorage` allocates exactly this, so the memory budget
checked before training (`kuberl.trainer.run.memory_budget`) is what the shards will take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from kuberl.trainer.replay.segment_tree import tree_leaves
from kuberl.trainer.sampling.rollout_worker import stored_dtype

# Extra frames per step for episode ends (a final frame, a reset frame): episodes of 100 steps or
# more for images (Atari's are hundreds), of 10 or more where a frame is small and slack is cheap.
EPISODE_END_FRAMES_PER_STEP = {"image": 1 / 100, "small": 1 / 10}
SMALL_FRAME_BYTES = 1024
FRAME_ID_BYTES = 8  # int64 global frame ids
DISCRETE_ACTION_BYTES = 8  # int64 discrete actions, as the Q-policy emits them
CONTINUOUS_ACTION_ITEM_BYTES = 4  # float32 Box actions, as SAC's policy emits them
PER_TRANSITION_SCALARS = 8 + 4 + 4  # id (int64), n-step reward and discount (float32)


@dataclass(frozen=True)
class FrameLayout:
    """How observations are split into frames: stack depth k, one frame's shape and dtype."""

    stack_depth: int
    frame_shape: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def of(cls, observation_space: gym.Space, frame_stack: int = 1, observation_filter: str = "none") -> FrameLayout:
        """The layout replay uses for an env; a mean/std filter makes every stack position differ (k = 1)."""
        shape = tuple(observation_space.shape or ())
        dtype = stored_dtype(np.dtype(observation_space.dtype)) if observation_filter == "none" \
            else np.dtype(np.float32)
        if frame_stack > 1 and observation_filter == "none" and shape[:1] == (frame_stack,):
            return cls(frame_stack, shape[1:], dtype)
        return cls(1, shape, dtype)

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frame_shape, dtype=np.int64)) * self.dtype.itemsize


def frames_per_transition(layout: FrameLayout, fragment_length: int) -> float:
    """Frames the ring keeps per transition: 1, plus k per fragment and env (its first stack's older
    k - 1 frames, its bootstrap frame), plus an allowance for episode ends."""
    kind = "small" if layout.frame_bytes <= SMALL_FRAME_BYTES else "image"
    return 1 + layout.stack_depth / fragment_length + EPISODE_END_FRAMES_PER_STEP[kind]


def action_bytes(action_space: gym.Space) -> int:
    """Bytes one stored action takes: an int64 for Discrete, float32s for a Box."""
    if isinstance(action_space, gym.spaces.Box):
        return int(np.prod(action_space.shape, dtype=np.int64)) * CONTINUOUS_ACTION_ITEM_BYTES
    return DISCRETE_ACTION_BYTES


def bytes_per_transition(layout: FrameLayout, fragment_length: int, capacity: int, *, prioritized: bool,
                         action_size: int = DISCRETE_ACTION_BYTES) -> float:
    """Bytes one transition slot of a buffer of `capacity` takes, everything allocated counted."""
    frames = math.ceil(capacity * frames_per_transition(layout, fragment_length)) * layout.frame_bytes / capacity
    indices = 2 * layout.stack_depth * FRAME_ID_BYTES
    trees = 2 * 2 * tree_leaves(capacity) * 8 / capacity if prioritized else 0.0  # sum and min trees, float64
    return frames + indices + action_size + PER_TRANSITION_SCALARS + trees


def replay_bytes(layout: FrameLayout, fragment_length: int, capacities: list[int], *, prioritized: bool,
                 action_size: int = DISCRETE_ACTION_BYTES) -> list[int]:
    """Bytes each buffer (shard) of these capacities takes."""
    return [math.ceil(bytes_per_transition(layout, fragment_length, c, prioritized=prioritized,
                                           action_size=action_size) * c)
            for c in capacities]
