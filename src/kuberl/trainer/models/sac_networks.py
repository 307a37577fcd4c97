"""SAC's networks: a squashed Gaussian actor and twin Q-networks Q(s, a).

The actor's Gaussian over u is squashed by tanh and scaled to the Box: a = scale * tanh(u) + bias, with
scale = (high - low) / 2 and bias = (high + low) / 2. Its log-density is the Gaussian's minus the log of
the Jacobian, sum_i log(scale_i * (1 - tanh(u_i)^2)) (`squashed_log_prob`), so the entropy alpha is tuned
on is that of the action the env gets. The encoder is the shared one (`encoders`): an MLP body for vectors,
the conv stack for images; each Q-network has an encoder of its own and takes the action in env units.

The learner's bfloat16 autocast (`spec.learner.bf16`) covers the encoders only: the actor's heads, its
log-density and the Q-networks' heads run in float32. A Q-value of 500-1000 in bfloat16 (8-bit mantissa) moves in
steps of 2-4, about one step's reward.
"""

from __future__ import annotations

import contextlib
import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kuberl.trainer.models.actor_critic import Autocast, encode
from kuberl.trainer.models.encoders import EncoderSpec, build_encoder, is_image_space, linear_head
from kuberl.trainer.models.mlp import mlp

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
LOG_2 = math.log(2.0)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def box_scale_bias(action_space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    """(scale, bias) that map tanh's (-1, 1) onto a bounded Box; a Discrete or unbounded space is refused."""
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(f"SAC needs a Box action space, got {action_space}")
    low, high = action_space.low.astype(np.float64).ravel(), action_space.high.astype(np.float64).ravel()
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"SAC needs a Box action space with finite bounds, got {action_space}")
    return ((high - low) / 2).astype(np.float32), ((high + low) / 2).astype(np.float32)


def log_one_minus_tanh_squared(u: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2), stable for large |u|: 2 * (log 2 - u - softplus(-2u))."""
    return 2.0 * (LOG_2 - u - F.softplus(-2.0 * u))


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """log pi(a|s) of a = scale * tanh(u) + bias, u ~ N(mean, exp(log_std)): summed over action dimensions."""
    gaussian = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - HALF_LOG_2PI).sum(-1)
    return gaussian - (torch.log(scale) + log_one_minus_tanh_squared(u)).sum(-1)


class SquashedGaussianActor(nn.Module):
    """obs -> (mean, log_std) of u; actions are scale * tanh(u) + bias."""

    scale: torch.Tensor  # buffers
    bias: torch.Tensor

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, encoder: EncoderSpec):
        super().__init__()
        scale, bias = box_scale_bias(action_space)
        self.action_shape = tuple(action_space.shape or ())
        self.body = build_encoder(observation_space, encoder)
        self.mean = linear_head(self.body.out_features, len(scale), 0.01)
        self.log_std = linear_head(self.body.out_features, len(scale), 0.01)
        self.register_buffer("scale", torch.as_tensor(scale))
        self.register_buffer("bias", torch.as_tensor(bias))

    def forward(self, obs: torch.Tensor, autocast: Autocast = contextlib.nullcontext
                ) -> tuple[torch.Tensor, torch.Tensor]:
        features = encode(self.body, obs, autocast)
        return self.mean(features), self.log_std(features).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None,
               autocast: Autocast = contextlib.nullcontext) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, log pi(action|obs)) by the reparameterisation u = mean + std * noise (gradients flow)."""
        mean, log_std = self(obs, autocast)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * noise
        return self.scale * torch.tanh(u) + self.bias, squashed_log_prob(u, mean, log_std, self.scale)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action: the squashed, scaled mean."""
        mean, _ = self(obs)
        return self.scale * torch.tanh(mean) + self.bias


class QFunction(nn.Module):
    """Q(s, a): the encoder's features and the action, through an MLP of `hidden` widths, to one value."""

    def __init__(self, observation_space: gym.Space, action_dim: int, encoder: EncoderSpec):
        super().__init__()
        self.encoder = build_encoder(observation_space, encoder) if is_image_space(observation_space) else None
        features = self.encoder.out_features if self.encoder is not None else int(np.prod(observation_space.shape or ()))
        self.head = mlp(features + action_dim, encoder.hidden, 1, encoder.activation, out_gain=1.0)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, autocast: Autocast = contextlib.nullcontext
                ) -> torch.Tensor:
        features = encode(self.encoder, obs, autocast) if self.encoder is not None else obs.float().flatten(1)
        return self.head(torch.cat([features, action.float().flatten(1)], dim=-1)).squeeze(-1)


class TwinQ(nn.Module):
    """Two independent Q-networks (clipped double Q: the targets take their minimum)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, encoder: EncoderSpec):
        super().__init__()
        action_dim = int(np.prod(action_space.shape or ()))
        self.q1 = QFunction(observation_space, action_dim, encoder)
        self.q2 = QFunction(observation_space, action_dim, encoder)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, autocast: Autocast = contextlib.nullcontext
                ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q1(obs, action, autocast), self.q2(obs, action, autocast)
