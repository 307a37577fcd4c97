"""A PettingZoo Parallel env whose agents leave without a termination or truncation flag.

`quiet` and `waving` act for `leave_at` steps, then leave `agents` with both flags False: `quiet` gets no
observation on the step it leaves, `waving` gets one (its observation holds the step count, so a test can tell
which step's it is). `stayer` plays on until `length` steps truncate it. Every step earns each agent 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class LeavingAgentsEnv(ParallelEnv):
    metadata = {"name": "leaving_agents_v0", "render_modes": []}

    def __init__(self, length: int = 6, leave_at: int = 2):
        self.length, self.leave_at = length, leave_at
        self.possible_agents = ["quiet", "waving", "stayer"]
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(0.0, 100.0, (1,), dtype=np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        return np.array([float(self.t)], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards = dict.fromkeys(self.agents, 1.0)
        terminated = dict.fromkeys(self.agents, False)
        truncated = {a: self.t >= self.length for a in self.agents}
        leaving = self.t == self.leave_at
        obs = {a: self._obs() for a in self.agents if not (leaving and a == "quiet")}
        self.agents = [a for a in self.agents if not truncated[a] and not (leaving and a in ("quiet", "waving"))]
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


def leaving_agents_env(**config: Any) -> LeavingAgentsEnv:
    return LeavingAgentsEnv(**config)
