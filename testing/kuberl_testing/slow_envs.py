"""CartPole that takes a fixed wall time per step, like a costly simulator.

`kuberl_testing.slow_envs:SlowCartPole` (`env.id`, with `env.config: {stepSeconds: ...}` as
`step_seconds`) makes rollout workers the slow side, so that tests can see what a learner does
when it could sample far more than the workers add.
"""

from __future__ import annotations

import time
from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class SlowCartPole(CartPoleEnv):
    def __init__(self, step_seconds: float = 0.002, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        self.step_seconds = step_seconds

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        time.sleep(self.step_seconds)
        return super().step(action)
