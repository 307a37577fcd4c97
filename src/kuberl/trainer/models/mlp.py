"""MLP bodies: the layers every network here is built from."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def obs_size(space: gym.Space) -> int:
    """Flat size of a Box observation."""
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"observation space {space} is not a Box")
    return int(np.prod(space.shape))


def layer(in_features: int, out_features: int, gain: float = math.sqrt(2)) -> nn.Linear:
    """A linear layer with orthogonal weights and zero bias (PPO's usual initialisation)."""
    linear = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


def mlp(in_features: int, hidden: Sequence[int], out_features: int, activation: str = "tanh",
        out_gain: float = 1.0) -> nn.Sequential:
    """in -> hidden... -> out, with `activation` between layers and none after the last."""
    layers, size = hidden_layers(in_features, hidden, activation)
    layers.append(layer(size, out_features, out_gain))
    return nn.Sequential(*layers)


def hidden_layers(in_features: int, hidden: Sequence[int], activation: str) -> tuple[list[nn.Module], int]:
    """Linear + activation for each hidden width; the layers and the width they end with."""
    layers: list[nn.Module] = []
    size = in_features
    for width in hidden:
        layers += [layer(size, width), ACTIVATIONS[activation]()]
        size = width
    return layers, size
