"""The Q-network of DQN and Ape-X: observations to one Q-value per action, optionally dueling.

The encoder is a conv stack for image observations and an MLP body for vectors (`encoders`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from kuberl.api.hyperparams import CommonParams, DQNParams
from kuberl.trainer.models.actor_critic import Autocast, encode
from kuberl.trainer.models.encoders import (
    ConvEncoder,
    EncoderSpec,
    VectorEncoder,
    build_encoder,
    is_image_space,
)
from kuberl.trainer.models.mlp import hidden_layers, layer, obs_size


class QNetwork(nn.Module):
    """An encoder to one Q-value per action; dueling splits it into V(s) + A(s, a) - mean A.

    `body` is an encoder (`encoders.build_encoder`), or the width of a flat observation for an MLP
    body of `hidden` widths.
    """

    def __init__(self, body: int | ConvEncoder | VectorEncoder, n_actions: int, hidden: Sequence[int] = (),
                 activation: str = "relu", dueling: bool = True):
        super().__init__()
        self.flat = isinstance(body, int)
        if isinstance(body, int):
            layers, size = hidden_layers(body, hidden, activation)
            self.body: nn.Module = nn.Sequential(*layers)
        else:
            self.body, size = body, body.out_features
        self.dueling = dueling
        self.advantage = layer(size, n_actions, 1.0)
        self.value = layer(size, 1, 1.0) if dueling else None

    def forward(self, obs: torch.Tensor, autocast: Autocast = contextlib.nullcontext) -> torch.Tensor:
        """Q(s, .); `autocast` (the learner's bfloat16) covers the body only, the heads run in float32 (`encode`)."""
        features = encode(self.body, obs.float().flatten(1) if self.flat else obs, autocast)
        advantage = self.advantage(features)
        if self.value is None:
            return advantage
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


def q_network(observation_space: gym.Space, action_space: gym.Space, encoder: EncoderSpec,
              dueling: bool) -> QNetwork:
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"DQN needs a Discrete action space, got {action_space}")
    if is_image_space(observation_space):
        return QNetwork(build_encoder(observation_space, encoder), int(action_space.n), dueling=dueling)
    return QNetwork(obs_size(observation_space), int(action_space.n), encoder.hidden, encoder.activation, dueling)


def build_q_network(observation_space: gym.Space, action_space: gym.Space, params: DQNParams | CommonParams) -> QNetwork:
    return q_network(observation_space, action_space, EncoderSpec.from_params(params),
                     bool(getattr(params, "dueling", True)))
