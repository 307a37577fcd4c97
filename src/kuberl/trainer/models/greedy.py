"""Greedy policies as torch modules, for exports: filtered observations to actions, nothing random."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn


class Greedy(Protocol):
    def greedy(self, obs: torch.Tensor) -> torch.Tensor: ...


class GreedyActor(nn.Module):
    """An actor's most likely action: argmax of the logits (Discrete) or the Gaussian's mean (Box)."""

    actor: Greedy  # an nn.Module (Actor, PolicyHead, SquashedGaussianActor): registered as a submodule

    def __init__(self, actor: Greedy) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor.greedy(obs)


class GreedyQ(nn.Module):
    """The action of the highest Q-value."""

    def __init__(self, q_network: nn.Module) -> None:
        super().__init__()
        self.q_network = q_network

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_network(obs).argmax(dim=-1)
