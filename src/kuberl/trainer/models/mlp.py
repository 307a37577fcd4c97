"""Torch networks shared by the algorithms: MLP bodies and PPO's actor-critic."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
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
    layers: list[nn.Module] = []
    size = in_features
    for width in hidden:
        layers += [layer(size, width), ACTIVATIONS[activation]()]
        size = width
    layers.append(layer(size, out_features, out_gain))
    return nn.Sequential(*layers)


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


def state_dict_to_numpy(module: nn.Module) -> dict[str, np.ndarray]:
    """Weights as CPU numpy arrays: cheap to pickle and to put into Ray's object store."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_numpy_state_dict(module: nn.Module, weights: dict[str, np.ndarray]) -> None:
    module.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()})


class NumpyMLP:
    """Inference of an `mlp()` in numpy.

    Rollout workers step small batches (8-64 envs); for networks this size a
    numpy forward pass is several times faster than torch's per-call overhead.
    """

    def __init__(self, activation: str):
        self.activation = np.tanh if activation == "tanh" else (lambda x: np.maximum(x, 0.0))
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []

    def load(self, weights: dict[str, np.ndarray], prefix: str = "") -> None:
        """Take the Linear layers of `mlp()` weights named `{prefix}{index}.weight` / `.bias`, in order."""
        indices = sorted(
            int(key[len(prefix):].split(".")[0])
            for key in weights
            if key.startswith(prefix) and key.endswith(".weight") and key[len(prefix):].split(".")[0].isdigit()
        )
        self.layers = [
            (weights[f"{prefix}{i}.weight"].T.astype(np.float32), weights[f"{prefix}{i}.bias"].astype(np.float32))
            for i in indices
        ]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for i, (weight, bias) in enumerate(self.layers):
            x = x @ weight + bias
            if i < len(self.layers) - 1:
                x = self.activation(x)
        return x
