"""A tiny task with uint8 image observations, for exported-policy tests: which side is bright?

Each step shows a 1x36x36 uint8 image (36 is the smallest side the default Nature conv stack
takes) whose left or right half is brighter; the action naming that side earns 1. An episode is
8 images. Named in a manifest as `kuberl_testing.image_env:BrightSide`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SIZE = 36
STEPS = 8


class BrightSide(gym.Env):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.side = 0
        self.steps = 0

    def _draw(self) -> np.ndarray:
        self.side = int(self.np_random.integers(2))
        image = self.np_random.integers(0, 120, (1, SIZE, SIZE)).astype(np.uint8)
        half = SIZE // 2
        image[0, :, self.side * half:(self.side + 1) * half] += 100
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.steps = 0
        return self._draw(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self.side)
        self.steps += 1
        return self._draw(), reward, self.steps >= STEPS, False, {}
