"""The Q-learner of DQN and Ape-X DQN (Mnih et al. 2015, with double Q and importance weights), read top to bottom.

For an n-step transition (obs, action, reward, next_obs, discount) from replay, the target is
reward + discount * Q_target(next_obs, argmax_a Q_online(next_obs, a)) (double DQN; plain DQN takes the
argmax with the target network), and the loss is the importance-weighted squared error (`loss: mse`, DQN's
default) or Huber loss (`loss: huber`, Ape-X's) between Q_online(obs, action) and that target.
`QLearner.update` is one gradient step of it; DQN runs it in its process, Ape-X in its learner actor.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kuberl.api.hyperparams import DQNParams
from kuberl.trainer.iteration_result import Scalar
from kuberl.trainer.learning.device import Bf16Setting, learner_autocast, learner_bf16, to_device
from kuberl.trainer.models.q_network import QNetwork
from kuberl.trainer.models.weights import state_dict_to_numpy, torch_bytes, torch_load_bytes
from kuberl.trainer.replay.nstep import TRANSITION_KEYS

LEARNER_FILE = "q_learner.pt"


# -- the loss -------------------------------------------------------------------------------------
def q_targets(
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """reward + discount * Q_target(s', a*): double DQN picks a* with the online net, plain DQN with the target."""
    chooser = next_q_online if next_q_online is not None else next_q_target
    best = chooser.argmax(dim=1, keepdim=True)
    return reward + discount * next_q_target.gather(1, best).squeeze(1)


def weighted_td_loss(
    q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None,
    kind: Literal["huber", "mse"] = "huber",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, td_errors): the importance-weighted mean Huber (delta 1) or squared TD error, and the raw TD errors."""
    td_errors = targets - q_taken
    if kind == "huber":
        per_sample = F.huber_loss(q_taken, targets, reduction="none", delta=1.0)
    else:
        per_sample = F.mse_loss(q_taken, targets, reduction="none")
    loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
    return loss, td_errors.detach()


class QLearner:
    """Online and target Q-networks and their optimizer: one gradient step per `update(batch)`."""

    def __init__(self, network: QNetwork, params: DQNParams, device: torch.device, bf16: Bf16Setting = False):
        self.params = params
        self.device = device
        self.bf16 = learner_bf16(bf16, device, network)  # spec.learner.bf16 resolved on this device
        self.online = network.to(device)
        self.target = copy.deepcopy(self.online).eval()
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=params.lr)
        self.updates = 0
        self.target_syncs = 0
        self._loss_sum = 0.0
        self._q_sum = 0.0
        self._stat_count = 0

    def _autocast(self) -> Any:
        """bfloat16 autocast for the Q-networks' bodies where `spec.learner.bf16` asks for it."""
        return learner_autocast(self.device, self.bf16)

    def update(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """One step on a replay sample (obs, action, reward, next_obs, discount[, weights]); |TD errors| back."""
        t = to_device({k: batch[k] for k in (*TRANSITION_KEYS, "weights") if k in batch}, self.device)
        q = self.online(t["obs"], self._autocast)
        q_taken = q.gather(1, t["action"].long().unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q_target = self.target(t["next_obs"], self._autocast)
            next_q_online = self.online(t["next_obs"], self._autocast) if self.params.double_q else None
            targets = q_targets(t["reward"], t["discount"], next_q_target, next_q_online)
        loss, td_errors = weighted_td_loss(q_taken, targets, t.get("weights"), self.params.loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.params.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.online.parameters(), self.params.grad_clip)
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.params.target_update_interval == 0:
            self.sync_target()
        self._loss_sum += loss.item()
        self._q_sum += q_taken.mean().item()
        self._stat_count += 1
        return td_errors.abs().cpu().numpy()

    def sync_target(self) -> None:
        self.target.load_state_dict(self.online.state_dict())
        self.target_syncs += 1

    def take_stats(self) -> dict[str, Scalar]:
        """Mean loss and Q since the last call, and the running counters."""
        n = self._stat_count
        stats = {
            "updates": self.updates,
            "updatesTotal": self.updates,  # the key every learner reports its running count under
            "targetSyncs": self.target_syncs,
            "loss": self._loss_sum / n if n else None,
            "meanQ": self._q_sum / n if n else None,
            "device": str(self.device),
        }
        self._loss_sum = self._q_sum = 0.0
        self._stat_count = 0
        return stats

    def weights(self) -> dict[str, np.ndarray]:
        return state_dict_to_numpy(self.online)

    def state_files(self) -> dict[str, bytes]:
        """Checkpoint files: both networks, the optimizer and the update counters."""
        state = {
            "online": self.online.state_dict(), "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(), "updates": self.updates, "targetSyncs": self.target_syncs,
        }
        return {LEARNER_FILE: torch_bytes(state)}

    def load_state_files(self, files: dict[str, bytes]) -> None:
        state = torch_load_bytes(files[LEARNER_FILE], self.device)
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.target_syncs = int(state["targetSyncs"])


__all__ = ["LEARNER_FILE", "QLearner", "q_targets", "weighted_td_loss"]
