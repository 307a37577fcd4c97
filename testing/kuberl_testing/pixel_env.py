"""A small image task for learning tests from pixels: say which quadrant the square is drawn in.

Each step shows a 1x16x16 uint8 image with a bright 4x4 square in one quadrant (and some noise);
the right action (0-3, the quadrant) earns 1. An episode is 8 images, so a random policy scores
about 2 and a policy that reads the image scores 8. Importing this module registers
`PixelQuadrant-v0`, so a manifest names it Gymnasium's way: `kuberl_testing.pixel_env:PixelQuadrant-v0`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SIZE = 16
STEPS = 8
ENV_ID = "PixelQuadrant-v0"


class PixelQuadrant(gym.Env):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, noise: int = 40):
        self.observation_space = gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self.noise = noise
        self.quadrant = 0
        self.steps = 0

    def _draw(self) -> np.ndarray:
        self.quadrant = int(self.np_random.integers(4))
        image = self.np_random.integers(0, self.noise + 1, (1, SIZE, SIZE)).astype(np.uint8)
        half = SIZE // 2
        top = (self.quadrant // 2) * half + int(self.np_random.integers(0, half - 4 + 1))
        left = (self.quadrant % 2) * half + int(self.np_random.integers(0, half - 4 + 1))
        image[0, top:top + 4, left:left + 4] = 255
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.steps = 0
        return self._draw(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self.quadrant)
        self.steps += 1
        return self._draw(), reward, self.steps >= STEPS, False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=PixelQuadrant)
