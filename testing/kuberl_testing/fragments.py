"""Rollout fragments for replay tests: synthetic frame-stacked trajectories, and a plain n-step reference.

`StackedStreams` plays E independent episodes streams frame by frame and stacks frames the way
Gymnasium's FrameStackObservation does (the reset frame repeated as padding, or zeros), with
either autoreset convention of Gymnasium's vector envs, and returns fragments shaped like a
`RolloutWorker`'s sample batches. Streams continue across fragments, so a fragment usually
starts in the middle of an episode.

`reference_transitions` is the plain n-step builder the compact replay is checked against: a
list of (obs, action, reward, next_obs, discount), written as loops over each env's steps.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np


class StackedStreams:
    """E envs of random frames: an episode ends each step with probability `p_end` (half terminated,
    half truncated), and a new frame repeats the previous one with probability `p_static`."""

    def __init__(self, envs: int, stack: int, frame_shape: tuple[int, ...], *, seed: int, padding: str = "reset",
                 same_step: bool = True, p_end: float = 0.1, p_static: float = 0.1, levels: int = 256,
                 dtype: type = np.uint8):
        self.rng = np.random.default_rng(seed)
        self.envs, self.stack, self.frame_shape = envs, stack, frame_shape
        self.padding, self.same_step = padding, same_step
        self.p_end, self.p_static, self.levels, self.dtype = p_end, p_static, levels, dtype
        self.queues = [self._reset_queue() for _ in range(envs)]
        self.resetting = np.zeros(envs, dtype=bool)  # next-step autoreset: this step only resets

    def _frame(self) -> np.ndarray:
        return self.rng.integers(0, self.levels, self.frame_shape).astype(self.dtype)

    def _reset_queue(self) -> deque[np.ndarray]:
        first = self._frame()
        pad = first if self.padding == "reset" else np.zeros(self.frame_shape, dtype=self.dtype)
        return deque([pad] * (self.stack - 1) + [first], maxlen=self.stack)

    def _observe(self, e: int) -> np.ndarray:
        stacked = np.stack(self.queues[e])
        return stacked if self.stack > 1 else stacked[0]

    def _advance(self, e: int) -> None:
        queue = self.queues[e]
        queue.append(queue[-1].copy() if self.rng.random() < self.p_static else self._frame())

    def fragment(self, steps: int) -> dict[str, np.ndarray]:
        """One fragment [steps, envs, ...]: obs, actions, rewards, terminateds, truncateds, next_obs, valid."""
        obs_shape = self._observe(0).shape
        data: dict[str, Any] = {
            "obs": np.empty((steps, self.envs, *obs_shape), dtype=self.dtype),
            "next_obs": np.empty((steps, self.envs, *obs_shape), dtype=self.dtype),
            "actions": self.rng.integers(0, 4, (steps, self.envs)),
            "rewards": self.rng.normal(size=(steps, self.envs)).astype(np.float32),
            "terminateds": np.zeros((steps, self.envs), dtype=bool),
            "truncateds": np.zeros((steps, self.envs), dtype=bool),
            "valid": np.ones((steps, self.envs), dtype=bool),
        }
        for t in range(steps):
            for e in range(self.envs):
                data["obs"][t, e] = self._observe(e)
                if self.resetting[e]:  # next-step autoreset: no transition, the reset obs comes next
                    self.queues[e] = self._reset_queue()
                    data["next_obs"][t, e] = self._observe(e)
                    data["valid"][t, e] = self.resetting[e] = False
                    continue
                self._advance(e)
                data["next_obs"][t, e] = self._observe(e)
                if self.rng.random() < self.p_end:
                    ended = "terminateds" if self.rng.random() < 0.5 else "truncateds"
                    data[ended][t, e] = True
                    if self.same_step:
                        self.queues[e] = self._reset_queue()
                    else:
                        self.resetting[e] = True
        data["rewards"][~data["valid"]] = 0.0
        return data


def reference_transitions(data: dict[str, np.ndarray], *, gamma: float, n: int) -> list[tuple]:
    """(obs, action, reward, next_obs, discount) of every valid step, env by env (the compact form's order).

    A transition sums up to n rewards; it stops at a terminated step (discount 0), a truncated one
    (it bootstraps from the final obs) and at the fragment's last step (it bootstraps from there).
    """
    steps, envs = data["rewards"].shape
    out = []
    for e in range(envs):
        for t in range(steps):
            if not data["valid"][t, e]:
                continue
            ret, discount = 0.0, 1.0
            for s in range(t, min(t + n, steps)):
                ret += discount * float(data["rewards"][s, e])
                discount *= gamma
                if data["terminateds"][s, e]:
                    discount = 0.0
                    break
                if data["truncateds"][s, e]:
                    break
            out.append((data["obs"][t, e], data["actions"][t, e], ret, data["next_obs"][s, e], discount))
    return out


def assert_matches_reference(batch: dict[str, np.ndarray], reference: list[tuple]) -> None:
    """A decoded batch (obs, action, reward, next_obs, discount) equals the reference rows, in order."""
    assert len(batch["action"]) == len(reference)
    for i, (obs, action, ret, next_obs, discount) in enumerate(reference):
        assert np.array_equal(batch["obs"][i], obs), f"obs of row {i}"
        assert batch["action"][i] == action, f"action of row {i}"
        assert np.isclose(batch["reward"][i], ret, rtol=1e-6, atol=1e-6), f"reward of row {i}"
        assert np.array_equal(batch["next_obs"][i], next_obs), f"next_obs of row {i}"
        assert np.isclose(batch["discount"][i], discount, rtol=1e-6), f"discount of row {i}"
        assert batch["obs"][i].dtype == obs.dtype
