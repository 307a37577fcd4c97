"""PPO's networks: a Categorical or Gaussian actor and a separate critic."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from kuberl.trainer.models.mlp import mlp, obs_size

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Actor(nn.Module):
    """The policy: Categorical logits for Discrete actions; a Gaussian with a state-independent log-std for Box."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden: Sequence[int], activation: str):
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        n_out = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        self.net = mlp(obs_size(observation_space), hidden, n_out, activation, out_gain=0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(n_out))

    def distribution(self, obs: torch.Tensor) -> Distribution:
        out = self.net(obs)
        if self.discrete:
            return Categorical(logits=out)
        return Normal(out, self.log_std.exp().expand_as(out))

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a|s) and the policy's entropy, written out: torch.distributions costs more than the math here."""
        out = self.net(obs)
        if self.discrete:
            log_probs = torch.log_softmax(out, dim=-1)
            logp = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            return logp, entropy
        log_std = self.log_std.expand_as(out)
        z = (actions - out) / log_std.exp()
        logp = (-0.5 * z**2 - log_std - HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + HALF_LOG_2PI + log_std).sum(-1)
        return logp, entropy

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(obs)
        return out.argmax(-1) if self.discrete else out


class ActorCritic(nn.Module):
    """Separate actor and critic networks (no shared body: steadier on small control tasks)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden: Sequence[int], activation: str):
        super().__init__()
        self.actor = Actor(observation_space, action_space, hidden, activation)
        self.critic = mlp(obs_size(observation_space), hidden, 1, activation, out_gain=1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)
