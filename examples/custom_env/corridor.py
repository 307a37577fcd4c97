"""A corridor: walk right to the goal before time runs out.

A small, fast Gymnasium env that shows what kuberl needs from a user's env: a `gymnasium.Env`
subclass whose constructor takes `spec.env.config` as keyword arguments, with Box observations
and (for DQN) Discrete actions. Name it in a manifest as "custom_env.corridor:CorridorEnv".
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

LEFT, RIGHT = 0, 1


class CorridorEnv(gym.Env[np.ndarray, int]):
    metadata = {"render_modes": []}

    def __init__(self, length: int = 10, max_steps: int = 50, step_penalty: float = 0.01):
        if length < 2:
            raise ValueError(f"length must be >= 2, got {length}")
        self.length = length
        self.max_steps = max_steps
        self.step_penalty = step_penalty
        # Observation: position along the corridor and time used, both scaled to [0, 1].
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._position = 0
        self._steps = 0

    def _observation(self) -> np.ndarray:
        return np.array([self._position / self.length, self._steps / self.max_steps], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._position = int(self.np_random.integers(0, self.length // 2))
        self._steps = 0
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be 0 (left) or 1 (right), got {action!r}")
        self._position = max(0, self._position + (1 if action == RIGHT else -1))
        self._steps += 1
        reached = self._position >= self.length
        reward = 1.0 if reached else -self.step_penalty
        truncated = not reached and self._steps >= self.max_steps
        return self._observation(), reward, reached, truncated, {}
