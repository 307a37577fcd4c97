"""Bytes per transition: the pure function from the observation space, and what the compact store
really allocates (measured with tracemalloc) for Atari-sized frames (84x84, stack 4)."""

from __future__ import annotations

import tracemalloc

import gymnasium as gym
import numpy as np
import pytest

from kuberl.trainer.replay.buffers import PrioritizedReplayBuffer, split_capacity
from kuberl.trainer.replay.frames import NStepRows, encode_frames
from kuberl.trainer.replay.memory import (
    FrameLayout,
    action_bytes,
    bytes_per_transition,
    frames_per_transition,
    replay_bytes,
)
from kuberl.trainer.replay.nstep import nstep_targets
from kuberl_testing.fragments import StackedStreams

ATARI = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
KB8 = 8 * 1024


def _atari_fragments(count: int, *, steps: int = 64, envs: int = 8):
    """Fragments of 84x84 frames with Atari-like episodes (about 300 steps), in the compact form."""
    streams = StackedStreams(envs, 4, (84, 84), seed=0, p_end=1 / 300, p_static=0.0)
    for _ in range(count):
        data = streams.fragment(steps)
        returns, discount, last = nstep_targets(data["rewards"], data["terminateds"], data["truncateds"],
                                                gamma=0.99, n=3)
        yield encode_frames(data["obs"], data["next_obs"], data["actions"],
                            NStepRows.select(data["valid"], returns, discount, last), 4)


def test_layout_from_the_observation_space() -> None:
    assert FrameLayout.of(ATARI, 4) == FrameLayout(4, (84, 84), np.dtype(np.uint8))
    assert FrameLayout.of(ATARI, 4).frame_bytes == 7056
    assert FrameLayout.of(ATARI, 1).stack_depth == 1  # not stacked: one frame is the whole observation
    assert FrameLayout.of(ATARI, 4, "mean_std") == FrameLayout(1, (4, 84, 84), np.dtype(np.float32))
    vectors = gym.spaces.Box(-1, 1, (6,), dtype=np.float64)
    assert FrameLayout.of(vectors) == FrameLayout(1, (6,), np.dtype(np.float32))  # float vectors are float32
    assert FrameLayout.of(ATARI, 3).stack_depth == 1  # a depth that is not the first dim is ignored


def test_bytes_per_transition_of_an_atari_stack_by_hand() -> None:
    layout = FrameLayout.of(ATARI, 4)
    assert frames_per_transition(layout, 64) == pytest.approx(1 + 4 / 64 + 1 / 100)
    capacity = 2**19  # a power of two: the trees have exactly 2 * capacity nodes each
    frames = np.ceil(capacity * (1 + 4 / 64 + 1 / 100)) * 7056 / capacity
    expected = frames + 2 * 4 * 8 + 8 + 16 + 2 * 2 * 8  # frame ids, action, id/reward/discount, two trees
    assert bytes_per_transition(layout, 64, capacity, prioritized=True) == pytest.approx(expected)
    assert bytes_per_transition(layout, 64, capacity, prioritized=False) == pytest.approx(expected - 32)
    assert expected <= KB8


def test_a_million_atari_transitions_fit_8_gb_across_two_shards() -> None:
    shards = replay_bytes(FrameLayout.of(ATARI, 4), 64, split_capacity(1_000_000, 2), prioritized=True)
    assert sum(shards) <= 8e9, sum(shards)
    # the figure for the plain form: obs and next_obs as float32, 37.6 GiB for 100,000 raw frames
    assert sum(shards) < 1_000_000 * 2 * 4 * 84 * 84 * 4 / 25


def test_the_compact_store_allocates_what_the_function_says_and_at_most_8_kb_per_transition() -> None:
    layout, capacity = FrameLayout.of(ATARI, 4), 4000
    fragments = _atari_fragments(12)  # 6,144 transitions: the ring wraps
    first = next(fragments)
    PrioritizedReplayBuffer(100, frames_per_transition=2.0).add(first)  # imports numpy does lazily: not the buffer's
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        buffer = PrioritizedReplayBuffer(capacity, seed=0, frames_per_transition=frames_per_transition(layout, 64))
        buffer.add(first)
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    measured = allocated / capacity
    assert measured <= KB8, measured
    assert measured == pytest.approx(bytes_per_transition(layout, 64, capacity, prioritized=True), rel=0.01)
    assert buffer.nbytes / capacity == pytest.approx(measured, rel=0.01)
    for fragment in fragments:
        buffer.add(fragment)
    assert buffer.storage.adds > capacity
    assert len(buffer) >= 0.98 * capacity  # the frame ring holds a full buffer's frames for such episodes
    sample = buffer.sample(64)
    assert sample["obs"].shape == (64, 4, 84, 84) and sample["obs"].dtype == np.uint8
    assert sample["next_obs"].dtype == np.uint8


def test_on_the_wire_an_atari_transition_is_a_frame_and_a_few_indices() -> None:
    fragment = next(_atari_fragments(1))
    per_transition = fragment.nbytes / len(fragment)
    assert per_transition <= 7056 * (1 + 4 / 64) + 64, per_transition
    assert fragment.frames.dtype == np.uint8


def test_continuous_actions_are_counted_at_their_float32_size() -> None:
    layout = FrameLayout.of(gym.spaces.Box(-1, 1, (17,), dtype=np.float64))  # HalfCheetah's observations
    cheetah_actions = gym.spaces.Box(-1, 1, (6,), dtype=np.float32)
    assert action_bytes(cheetah_actions) == 6 * 4 and action_bytes(gym.spaces.Discrete(6)) == 8
    discrete = bytes_per_transition(layout, 64, 1000, prioritized=False)
    continuous = bytes_per_transition(layout, 64, 1000, prioritized=False, action_size=action_bytes(cheetah_actions))
    assert continuous - discrete == pytest.approx(24 - 8)
