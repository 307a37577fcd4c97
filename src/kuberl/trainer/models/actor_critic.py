"""PPO's networks: a Categorical or Gaussian actor and a critic.

For vector observations the actor and the critic are separate MLPs (steadier on small control
tasks, and the actor runs in numpy on rollout workers). For images they share the conv encoder
(`actor.net[0]`), as in the Nature/IMPALA agents: one conv pass serves both heads.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager as ContextManager
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from kuberl.trainer.models.encoders import (
    ConvEncoder,
    EncoderSpec,
    build_encoder,
    is_image_space,
    linear_head,
)
from kuberl.trainer.models.mlp import mlp, obs_size

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
# The learner's bfloat16 autocast (`spec.learner.bf16`), given to the models' passes to cover their encoders only.
Autocast = Callable[[], ContextManager[Any]]


def encode(encoder: nn.Module, obs: torch.Tensor, autocast: Autocast = contextlib.nullcontext) -> torch.Tensor:
    """The encoder's features under the learner's autocast, back in float32 for the heads: bfloat16 heads on a CPU
    put log pi(a|s) off by up to 0.04 (a sharp policy) and round a Q-value of 10 to steps of 0.06."""
    with autocast():
        features = encoder(obs)
    return features.float()


def _policy_net(observation_space: gym.Space, n_out: int, encoder: EncoderSpec) -> nn.Sequential:
    if is_image_space(observation_space):
        body = build_encoder(observation_space, encoder)
        return nn.Sequential(body, linear_head(body.out_features, n_out, 0.01))
    return mlp(obs_size(observation_space), encoder.hidden, n_out, encoder.activation, out_gain=0.01)


def log_prob_entropy(inputs: torch.Tensor, actions: torch.Tensor,
                     log_std: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(a|s) and the entropy from a distribution's inputs: Categorical logits, or a Gaussian's mean with
    `log_std`. Written out: torch.distributions costs more than the math here."""
    if log_std is None:
        log_probs = torch.log_softmax(inputs, dim=-1)
        logp = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        return logp, -(log_probs.exp() * log_probs).sum(-1)
    log_std = log_std.expand_as(inputs)
    z = (actions - inputs) / log_std.exp()
    return (-0.5 * z**2 - log_std - HALF_LOG_2PI).sum(-1), (0.5 + HALF_LOG_2PI + log_std).sum(-1)


class Actor(nn.Module):
    """The policy: Categorical logits for Discrete actions; a Gaussian with a state-independent log-std for Box."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden: Sequence[int], activation: str,
                 encoder: EncoderSpec | None = None):
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        n_out = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) \
            else int(np.prod(action_space.shape or ()))
        spec = encoder or EncoderSpec()
        spec = EncoderSpec(tuple(hidden), activation, spec.conv, spec.conv_hidden)
        self.net = _policy_net(observation_space, n_out, spec)
        self.image = is_image_space(observation_space)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(n_out))

    def outputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The net's output: logits, or the Gaussian's mean (a vector observation of any rank is flattened)."""
        return self.net(obs if self.image else obs.flatten(1))

    def distribution(self, obs: torch.Tensor) -> Distribution:
        out = self.outputs(obs)
        if self.discrete:
            return Categorical(logits=out)
        return Normal(out, self.log_std.exp().expand_as(out))

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.log_prob_entropy_of(self.outputs(obs), actions)

    def log_prob_entropy_of(self, out: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a|s) and the policy's entropy from the net's output."""
        return log_prob_entropy(out, actions, None if self.discrete else self.log_std)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.outputs(obs)
        return out.argmax(-1) if self.discrete else out


class ActorCritic(nn.Module):
    """The actor and a critic: a separate MLP for vectors, a value head on the actor's encoder for images."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden: Sequence[int], activation: str,
                 encoder: EncoderSpec | None = None):
        super().__init__()
        self.actor = Actor(observation_space, action_space, hidden, activation, encoder)
        self.shared = is_image_space(observation_space)
        self.critic: nn.Module
        if self.shared:  # the policy net is the conv encoder, then the head (_policy_net)
            self.critic = linear_head(cast(ConvEncoder, self.actor.net[0]).out_features, 1, 1.0)
        else:
            self.critic = mlp(obs_size(observation_space), hidden, 1, activation, out_gain=1.0)

    def value(self, obs: torch.Tensor, autocast: Autocast = contextlib.nullcontext
              ) -> torch.Tensor:
        """V(s); `autocast` covers the shared conv encoder only (see `evaluate`)."""
        if self.shared:
            return self.critic(encode(self.actor.net[0], obs, autocast)).squeeze(-1)
        return self.critic(obs.flatten(1)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor,
                 autocast: Autocast = contextlib.nullcontext
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """log pi(a|s), the entropy and V(s), with one encoder pass where the encoder is shared.

        `autocast` (the learner's bfloat16, `spec.learner.bf16`) covers the conv encoder only: the heads, the
        log-softmax and the entropy run in float32. On a CPU autocast would run them in bfloat16 too, whose 8-bit
        mantissa puts log pi(a|s) off by up to about 0.04 where the logits are large (a sharp policy): as large
        as a PPO step's whole change.
        """
        if not self.shared:
            logp, entropy = self.actor.log_prob_entropy(obs, actions)
            return logp, entropy, self.value(obs)
        features = encode(self.actor.net[0], obs, autocast)
        logp, entropy = self.actor.log_prob_entropy_of(self.actor.net[1](features), actions)
        return logp, entropy, self.critic(features).squeeze(-1)
