"""Small uint8 image envs for the pixel pipeline's tests: cheap to step, frame-stacked like Atari.

`kuberl_testing.image_envs:StackedBeacon` is what a manifest names (`env.id`), with `env.config`
keywords. A beacon lights one quadrant of a dark frame; the action that names the lit quadrant
earns 1. The beacon moves every step with probability `move`, so the last frames of the stack
tell the agent where it is. An episode terminates after `mistakes` wrong actions and is
truncated at `max_steps`; both ends happen often, so every path through episode boundaries
(terminated, truncated, the reset frame repeated as stack padding) is exercised.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import FrameStackObservation


class Beacon(gym.Env):
    """One (size, size) uint8 frame; Discrete(4) actions, one per quadrant."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, size: int = 84, max_steps: int = 60, mistakes: int = 3, move: float = 0.3):
        self.size = size
        self.max_steps = max_steps
        self.mistakes_allowed = mistakes
        self.move = move
        self.observation_space = gym.spaces.Box(0, 255, (size, size), dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self.quadrant = 0
        self.steps = 0
        self.mistakes = 0

    def _frame(self) -> np.ndarray:
        frame = self.np_random.integers(0, 40, (self.size, self.size), dtype=np.uint8)  # noise
        half = self.size // 2
        row, col = divmod(self.quadrant, 2)
        frame[row * half:(row + 1) * half, col * half:(col + 1) * half] += 200
        return frame

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.quadrant = int(self.np_random.integers(4))
        self.steps = 0
        self.mistakes = 0
        return self._frame(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        hit = int(action) == self.quadrant
        self.mistakes += not hit
        self.steps += 1
        if self.np_random.random() < self.move:
            self.quadrant = int(self.np_random.integers(4))
        terminated = self.mistakes >= self.mistakes_allowed
        truncated = not terminated and self.steps >= self.max_steps
        return self._frame(), float(hit), terminated, truncated, {}


class StackedBeacon(FrameStackObservation):
    """`Beacon` behind Gymnasium's FrameStackObservation: observations (stack, size, size) uint8."""

    def __init__(self, stack: int = 4, padding_type: str = "reset", **beacon: Any):
        super().__init__(Beacon(**beacon), stack, padding_type=padding_type)
