"""Wrappers that give a real Gymnasium env's vector observations another shape, for `env.wrappers`."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
from gymnasium.wrappers import ReshapeObservation


class ReshapedObservation(ReshapeObservation):
    """Gymnasium's ReshapeObservation taking the shape as a list, as a manifest's `kwargs` give it:
    `{name: kuberl_testing.vector_envs:ReshapedObservation, kwargs: {shape: [2, 2]}}` makes CartPole's 4
    observations a (2, 2) float32 Box, a vector observation of rank 2."""

    def __init__(self, env: gym.Env, shape: Sequence[int]):
        super().__init__(env, tuple(shape))
