"""The Q-network of DQN and Ape-X: observations to one Q-value per action, optionally dueling."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from kuberl.api.hyperparams import DQNParams
from kuberl.trainer.models.mlp import hidden_layers, layer, obs_size


class QNetwork(nn.Module):
    """An MLP from observations to one Q-value per action; dueling splits it into V(s) + A(s, a) - mean A."""

    def __init__(self, in_features: int, n_actions: int, hidden: Sequence[int], activation: str, dueling: bool):
        super().__init__()
        layers, size = hidden_layers(in_features, hidden, activation)
        self.body = nn.Sequential(*layers)
        self.dueling = dueling
        self.advantage = layer(size, n_actions, 1.0)
        self.value = layer(size, 1, 1.0) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.body(obs.flatten(1).float())  # uint8 observations become float here, on the device
        advantage = self.advantage(features)
        if self.value is None:
            return advantage
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


def build_q_network(observation_space: gym.Space, action_space: gym.Space, params: DQNParams) -> QNetwork:
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"DQN needs a Discrete action space, got {action_space}")
    return QNetwork(obs_size(observation_space), int(action_space.n), params.hidden, params.activation, params.dueling)
