"""The compact form of n-step transitions: each distinct frame once, in its own dtype, and indices into them.

A fragment of T steps of E envs whose observations are stacks of k frames (Gymnasium's
`FrameStackObservation`: shape (k, *frame)) holds, per env, a stack at every step whose first k - 1
frames are the previous stack's last k - 1. It becomes:

    frames       [M, *frame]  every frame once (uint8 for images), M ~ T*E + k*E
    obs_frames   [N, k]       the frames of each transition's observation, oldest first
    next_frames  [N, k]       the frames of the observation it bootstraps from
    action, reward, discount  [N]  (reward and discount are the n-step ones, `nstep.nstep_targets`)

Unstacked observations are stacks of one frame (k = 1): each observation is stored once, and
next_obs is never a second copy. Encoding compares the data instead of assuming how the stack
was built: a stack that repeats the previous one, or extends it by one frame, shares its frames;
anything else (an episode's first stack, whatever the padding: FrameStackObservation repeats the
reset frame by default, or pads with zeros) is stored as its distinct frames. Decoding therefore
gives back exactly the arrays the agent saw.

Each fragment carries everything its transitions need (its first stacks' older frames and its
bootstrap frames), so any shard can store it: Ape-X workers spread fragments over shards.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass
class NStepRows:
    """The valid transitions of a fragment in env-major order: step, env, bootstrap step, n-step targets."""

    step: np.ndarray
    env: np.ndarray
    last: np.ndarray
    reward: np.ndarray  # float32
    discount: np.ndarray  # float32

    @classmethod
    def select(cls, valid: np.ndarray, returns: np.ndarray, discount: np.ndarray, last: np.ndarray) -> NStepRows:
        env, step = np.nonzero(np.asarray(valid, dtype=bool).T)  # env-major: frames are laid out env by env
        return cls(step, env, last[step, env], returns[step, env].astype(np.float32),
                   discount[step, env].astype(np.float32))

    def __len__(self) -> int:
        return len(self.step)


@dataclass
class FrameTransitions:
    """n-step transitions as frames plus indices (see the module docstring); what shards store."""

    frames: np.ndarray
    obs_frames: np.ndarray  # int32 [N, k], into `frames`
    next_frames: np.ndarray  # int32 [N, k]
    action: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    obs_shape: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.action)

    @property
    def stack_depth(self) -> int:
        return self.obs_frames.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays: what the batch costs in the object store and on the wire."""
        return sum(a.nbytes for a in (self.frames, self.obs_frames, self.next_frames, self.action, self.reward,
                                      self.discount))

    def decode(self) -> dict[str, np.ndarray]:
        """The transitions as full arrays (obs, action, reward, next_obs, discount)."""
        n = len(self)
        return {
            "obs": self.frames[self.obs_frames].reshape(n, *self.obs_shape),
            "action": self.action,
            "reward": self.reward,
            "next_obs": self.frames[self.next_frames].reshape(n, *self.obs_shape),
            "discount": self.discount,
        }


def frame_stack_depth(env: gym.Env | gym.vector.VectorEnv) -> int:
    """k of the `FrameStackObservation` whose stacks the env returns, else 1.

    Looks through a SyncVectorEnv/AsyncVectorEnv's first env and through wrappers that keep the
    observation space; a wrapper that changes the space outside the stack hides it (then 1).
    """
    if isinstance(env, gym.vector.SyncVectorEnv):
        env = env.envs[0]
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.FrameStackObservation):
            return int(env.stack_size)
        if env.observation_space != env.env.observation_space:
            return 1
        env = env.env
    return 1


def encode_frames(obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray, rows: NStepRows,
                  stack_depth: int) -> FrameTransitions:
    """The compact form of a fragment's transitions `rows`; obs and next_obs are [T, E, *obs_shape].

    `stack_depth` k > 1 reads axis 0 of each observation as its frames; it must be the obs's first dim.
    """
    obs, next_obs = np.asarray(obs), np.asarray(next_obs)
    steps, envs = obs.shape[:2]
    obs_shape = obs.shape[2:]
    k = stack_depth
    if k > 1 and (not obs_shape or obs_shape[0] != k):
        raise ValueError(f"stack_depth {k} does not match observations of shape {obs_shape}")
    frame_shape = obs_shape[1:] if k > 1 else obs_shape
    stacks = obs.reshape(steps, envs, k, *frame_shape)
    next_stacks = next_obs.reshape(steps, envs, k, *frame_shape)
    words, next_words = _frame_words(stacks), _frame_words(next_stacks)
    # next_obs[t] extends obs[t] by one frame; obs[t + 1] is next_obs[t] (no episode start between).
    extends = (next_words[:, :, :-1] == words[:, :, 1:]).all(axis=(2, 3))
    repeats = (words[1:] == next_words[:-1]).all(axis=(2, 3))

    frames: list[np.ndarray] = []

    def store(t: int, e: int, source: np.ndarray, source_words: np.ndarray) -> list[int]:
        """Frame indices of a stack stored afresh: equal neighbours (padding) share one frame."""
        ids: list[int] = []
        for j in range(k):
            if j and (source_words[t, e, j] == source_words[t, e, j - 1]).all():
                ids.append(ids[-1])
            else:
                frames.append(source[t, e, j])
                ids.append(len(frames) - 1)
        return ids

    obs_ids = np.empty((steps, envs, k), dtype=np.int32)
    next_ids = np.empty((steps, envs, k), dtype=np.int32)
    for e in range(envs):
        current = store(0, e, stacks, words)
        for t in range(steps):
            obs_ids[t, e] = current
            if extends[t, e]:
                frames.append(next_stacks[t, e, -1])
                following = [*current[1:], len(frames) - 1]
            else:
                following = store(t, e, next_stacks, next_words)
            next_ids[t, e] = following
            if t + 1 < steps:
                current = following if repeats[t, e] else store(t + 1, e, stacks, words)
    return FrameTransitions(
        frames=np.stack(frames) if frames else np.empty((0, *frame_shape), dtype=obs.dtype),
        obs_frames=obs_ids[rows.step, rows.env],
        next_frames=next_ids[rows.last, rows.env],
        action=np.asarray(actions)[rows.step, rows.env],
        reward=rows.reward,
        discount=rows.discount,
        obs_shape=tuple(obs_shape),
    )


def _frame_words(stacks: np.ndarray) -> np.ndarray:
    """[T, E, k, words]: each frame's bytes as 8-byte words where they divide evenly (fewer, faster
    comparisons), else as bytes. Bytes, not values: a frame must come back bit for bit (NaN, -0.0)."""
    stacks = np.ascontiguousarray(stacks)
    raw = stacks.reshape(*stacks.shape[:3], -1).view(np.uint8)
    return raw.view(np.uint64) if raw.shape[-1] % 8 == 0 else raw
