"""Small PettingZoo envs for multi-agent tests: agents that leave early, join late, and differ in their spaces.

`RelayEnv` (Parallel API): `runner_0` and `runner_1` start; `runner_0` terminates after `leave_at` steps;
`late_0` joins after `join_at` steps; everyone left is truncated after `length` steps. Every agent observes
[parity of the step, step / length, 1 if it is late_0] and earns 1 for the action equal to the step's parity, so
a policy learns it from the observation alone, and the best team return is leave_at + length + (length - join_at).

`relay_env(**config)` is the `package.module:factory` form; `TurnTakingEnv` is an AEC env that is not
parallelizable (refused); `ParallelizableTurnsEnv` is one that is (converted with `aec_to_parallel`);
`PixelSidesEnv` gives its agents uint8 images, for a shared conv policy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv


class RelayEnv(ParallelEnv):
    metadata = {"name": "relay_v0", "render_modes": []}

    def __init__(self, length: int = 8, leave_at: int = 3, join_at: int = 2, wide_late: bool = False,
                 box_late: bool = False):
        self.length, self.leave_at, self.join_at = length, leave_at, join_at
        self.box_late = box_late  # late_0 acts with Box(0, 1, (1,)) (1 above 0.5): a task of another kind
        self.possible_agents = ["runner_0", "runner_1", "late_0"]
        self.agents: list[str] = []
        self.t = 0
        self.wide_late = wide_late  # late_0 observes 4 numbers instead of 3: a space clash with the runners

    def observation_space(self, agent: str) -> spaces.Box:
        size = 4 if self.wide_late and agent == "late_0" else 3
        return spaces.Box(0.0, 1.0, (size,), dtype=np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        if self.box_late and agent == "late_0":
            return spaces.Box(0.0, 1.0, (1,), dtype=np.float32)
        return spaces.Discrete(2)

    def _action(self, agent: str, action: Any) -> int:
        if self.box_late and agent == "late_0":
            return int(float(np.asarray(action).reshape(-1)[0]) > 0.5)
        return int(action)

    def _obs(self, agent: str) -> np.ndarray:
        values = [float(self.t % 2), self.t / self.length, float(agent == "late_0")]
        if self.wide_late and agent == "late_0":
            values.append(0.0)
        return np.array(values, dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        self.t = 0
        self.agents = ["runner_0", "runner_1"]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards = {a: float(self._action(a, actions[a]) == self.t % 2) for a in self.agents}
        self.t += 1
        terminated = {a: a == "runner_0" and self.t == self.leave_at for a in self.agents}
        truncated = {a: self.t >= self.length for a in self.agents}
        stay = [a for a in self.agents if not (terminated[a] or truncated[a])]
        if self.t == self.join_at and self.t < self.length:
            stay.append("late_0")
        obs = {a: self._obs(a) for a in {*self.agents, *stay}}
        infos = {a: {} for a in obs}
        self.agents = stay
        return obs, rewards, terminated, truncated, infos


def relay_env(**config: Any) -> RelayEnv:
    return RelayEnv(**config)


class PixelSidesEnv(ParallelEnv):
    """Two agents, each seeing an 8x8 grey image with a bright column at its left or right edge (drawn anew every
    step); the action naming the side earns 1. A conv policy shared by both learns it: the best team return is
    2 x length, random actions earn half."""

    metadata = {"name": "pixel_sides_v0", "render_modes": []}

    def __init__(self, length: int = 10):
        self.length = length
        self.possible_agents = ["eye_0", "eye_1"]
        self.agents: list[str] = []
        self.rng = np.random.default_rng()
        self.sides: dict[str, int] = {}
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(0, 255, (1, 8, 8), dtype=np.uint8)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(2)

    def _draw(self) -> dict[str, np.ndarray]:
        obs = {}
        for agent in self.agents:
            self.sides[agent] = int(self.rng.integers(2))
            image = np.zeros((1, 8, 8), dtype=np.uint8)
            image[0, :, 7 * self.sides[agent]] = 255
            obs[agent] = image
        return obs

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._draw(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards = {a: float(int(actions[a]) == self.sides[a]) for a in self.agents}
        self.t += 1
        done = self.t >= self.length
        obs = self._draw()
        terminated = dict.fromkeys(self.agents, False)
        truncated = dict.fromkeys(self.agents, done)
        infos = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, infos


class TurnTakingEnv(AECEnv):
    """Two players take turns (AEC); not parallelizable."""

    metadata = {"name": "turns_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["player_0", "player_1"]

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (1,), dtype=np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observe(self, agent: str) -> np.ndarray:
        return np.zeros(1, dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict] = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]
        self.turns = 0

    def step(self, action: Any) -> None:
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self.turns += 1
        self._cumulative_rewards[self.agent_selection] = 0.0
        self.rewards = {a: float(a == self.agent_selection and action == 1) for a in self.agents}
        if self.turns >= 6:
            self.truncations = dict.fromkeys(self.agents, True)
        self.agent_selection = self.agents[self.turns % 2]
        self._accumulate_rewards()


class ParallelizableTurnsEnv(TurnTakingEnv):
    """The same, but each cycle of turns is one parallel step: PettingZoo's `aec_to_parallel` converts it."""

    metadata = {"name": "turns_parallel_v0", "render_modes": [], "is_parallelizable": True}


__all__ = ["ParallelizableTurnsEnv", "PixelSidesEnv", "RelayEnv", "TurnTakingEnv", "relay_env"]
