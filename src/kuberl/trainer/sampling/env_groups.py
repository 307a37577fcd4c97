"""A rollout worker's envs split into groups that step in turn (`rollouts.envGroups`).

With one group, the policy picks actions for every env and then every env steps: the env threads wait
while the policy runs, and the policy waits while they step. With two, a group's actions go out
(`send`) and its envs step on their threads while the policy picks the other group's actions; the
results are collected (`recv`) when the worker comes back to the group. This is EnvPool's and Sample
Factory's double-buffered sampling, done with ALE's vector env's own send/recv (`steps_in_background`).
Other vector envs (Gymnasium's) step at `recv`: the same transitions, without the overlap.

Each group's vector env gets all of the worker's env threads: the groups step mostly at different times, so
halving the threads would halve each group's speed for nothing (they share the cores only for the moment a
group is sent before the other is done).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# A vector env's step: observations, rewards, terminations, truncations, info.
StepResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


def group_slices(num_envs: int, groups: int) -> list[slice]:
    """The worker's env columns of each group: `groups` equal, consecutive slices of `num_envs`."""
    if groups < 1 or num_envs % groups:
        raise ValueError(f"{num_envs} envs do not split into {groups} equal groups")
    size = num_envs // groups
    return [slice(g * size, (g + 1) * size) for g in range(groups)]


class EnvGroup:
    """One group's vector env, the worker's env columns it holds, and its envs' current observations (as the
    env gave them, and filtered for the policy)."""

    def __init__(self, env: gym.vector.VectorEnv, columns: slice):
        self.env = env
        self.columns = columns
        self.raw_obs: np.ndarray = np.empty(0)
        self.obs: np.ndarray = np.empty(0)
        self.overlaps = bool(getattr(env, "steps_in_background", False))
        self._actions: np.ndarray | None = None

    def send(self, actions: np.ndarray) -> None:
        """Start the step: the envs step on their own threads until `recv`, where the env can."""
        if self.overlaps:
            self.env.send(actions)  # type: ignore[attr-defined]
        else:
            self._actions = actions

    def recv(self) -> StepResult:
        """The step's result (blocking until the envs are done)."""
        if self.overlaps:
            return self.env.recv()  # type: ignore[attr-defined]
        actions, self._actions = self._actions, None
        assert actions is not None, "recv before send"
        return self.env.step(actions)

    def close(self) -> None:
        self.env.close()
