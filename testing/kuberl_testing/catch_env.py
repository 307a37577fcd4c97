"""A small pixel game with delayed credit, for learning tests: catch a falling ball with a paddle.

The screen is a 1x12x12 uint8 image. A ball starts in a random column of the top row and falls one row
per step; the paddle (3 pixels wide) sits on the bottom row and moves left, stays or moves right (actions
0, 1, 2). The episode ends when the ball reaches the bottom row, 11 steps after it started: +1 if the
paddle is under it, -1 if not, and nothing before. So the reward comes 8 or more steps after the moves
that decide it, and only a policy that reads the ball's column from the pixels and steers scores well: a
random one scores about -0.6, a perfect one 1. Importing this module registers `PixelCatch-v0`
(`kuberl_testing.catch_env:PixelCatch-v0` in a manifest).

`MODEL` is a small conv encoder for it whose layers cover the whole screen: convolutions drop the rows and
columns a stride does not reach, and a 3x3 stride-2 layer after a 3x3 stride-1 one never sees the bottom row
(the paddle) or the last column, which leaves the game partly hidden.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SIZE = 12
PADDLE = 3  # pixels wide: its left edge is at `paddle`
ENV_ID = "PixelCatch-v0"
MODEL = {"conv": [[16, 3, 1], [32, 4, 2]], "hidden": [64]}  # 12 -> 10 -> 4: every pixel reaches the output


class PixelCatch(gym.Env):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.ball_row = self.ball_col = self.paddle = 0

    def _draw(self) -> np.ndarray:
        image = np.zeros((1, SIZE, SIZE), dtype=np.uint8)
        image[0, self.ball_row, self.ball_col] = 255
        image[0, SIZE - 1, self.paddle:self.paddle + PADDLE] = 128
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.ball_row = 0
        self.ball_col = int(self.np_random.integers(SIZE))
        self.paddle = int(self.np_random.integers(SIZE - PADDLE + 1))
        return self._draw(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, SIZE - PADDLE))
        self.ball_row += 1
        landed = self.ball_row == SIZE - 1
        caught = self.paddle <= self.ball_col < self.paddle + PADDLE
        reward = (1.0 if caught else -1.0) if landed else 0.0
        return self._draw(), reward, landed, False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=PixelCatch)
