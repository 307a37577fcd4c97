"""One policy in training: its learner, the loop that feeds it, and the actor it acts with.

A single-agent algorithm holds one `PolicyLoop`; a multi-agent one holds one per policy, fed that policy's
columns of each fragment, so a policy of many agents learns exactly as one agent's would
(`kuberl.trainer.algorithms.ppo_loop`, `kuberl.trainer.algorithms.vtrace_loop`).
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from kuberl.trainer.models.actor_critic import Actor
from kuberl.trainer.models.greedy import GreedyActor
from kuberl.trainer.models.policy_value import PolicyHead
from kuberl.trainer.models.weights import state_dict_to_numpy


class PolicyLearner(Protocol):
    """What every learner of a policy loop has: its params, device and optimizer, and its checkpoint files."""

    @property
    def params(self) -> Any: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    def state_files(self) -> dict[str, bytes]: ...

    def load_state_files(self, files: dict[str, bytes]) -> None: ...


class PolicyLoop:
    """A learner and its policy's actor; a subclass says how it learns and how the actor picks actions."""

    learner: PolicyLearner

    @property
    def actor(self) -> Actor | PolicyHead:
        """The network the rollout workers run (PPO's actor, IMPALA's policy head)."""
        raise NotImplementedError

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        """Actions for a batch of (filtered) observations, sampled or greedy, from the learner's actor."""
        raise NotImplementedError

    def worker_weights(self) -> dict[str, np.ndarray]:
        return state_dict_to_numpy(self.actor)

    def policy_module(self) -> nn.Module:
        """The greedy policy, a copy on the CPU (training goes on)."""
        return GreedyActor(copy.deepcopy(self.actor).cpu().eval())

    def state_files(self) -> dict[str, bytes]:
        return self.learner.state_files()

    def load_state_files(self, files: dict[str, bytes]) -> None:
        self.learner.load_state_files(files)


__all__ = ["PolicyLearner", "PolicyLoop"]
