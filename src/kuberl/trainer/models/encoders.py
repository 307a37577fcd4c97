"""The encoder factory: observations to a feature vector, chosen from the observation space.

Every network that wants "features of an observation" asks `build_encoder`; today a flat Box gets an MLP.
Image observations (a Box of rank 3) get the conv encoder where one is built, from this one place.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from kuberl.trainer.models.mlp import hidden_layers, obs_size


class MLPEncoder(nn.Module):
    """Flattened observation -> hidden layers with activations; `out_features` wide."""

    def __init__(self, observation_space: gym.Space, hidden: Sequence[int], activation: str):
        super().__init__()
        layers, self.out_features = hidden_layers(obs_size(observation_space), hidden, activation)
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.flatten(1).float())


def build_encoder(observation_space: gym.Space, hidden: Sequence[int], activation: str) -> nn.Module:
    """An encoder module with an `out_features` attribute for `observation_space`."""
    if isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 3:
        raise ValueError(f"image observations {observation_space.shape} need a conv encoder (spec.config.model.conv)")
    return MLPEncoder(observation_space, hidden, activation)
