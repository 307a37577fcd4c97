"""SAC's learner (Soft Actor-Critic, Haarnoja et al. 2018, with automatic entropy tuning), read top to bottom.

The losses, for a transition (obs, action, reward, next_obs, discount) from replay (n-step as in DQN:
`discount` is gamma^n, or 0 past a terminal step) and a' ~ pi(.|next_obs):

    critic  y = reward + discount * (min_i Q_target_i(next_obs, a') - alpha * log pi(a'|next_obs))
            L_Q = sum_i mean(w * (Q_i(obs, action) - y)^2)      (w: prioritized replay's weights, else 1)
    actor   a~ ~ pi(.|obs) reparameterised:  L_pi = mean(alpha * log pi(a~|obs) - min_i Q_i(obs, a~))
    alpha   L_alpha = -mean(log_alpha * (log pi(a~|obs) + target_entropy)),  target_entropy = -dim(A)

`SACLearner.update` takes one step of each, in that order, then moves the target Q-networks towards the
online ones by tau (Polyak averaging). The policy is a tanh-squashed Gaussian scaled to the Box
(`kuberl.trainer.models.sac_networks`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import SACParams
from kuberl.trainer.iteration_result import Scalar
from kuberl.trainer.learning.device import Bf16Setting, learner_autocast, learner_bf16, to_device
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.sac_networks import SquashedGaussianActor, TwinQ
from kuberl.trainer.models.weights import state_dict_to_numpy, torch_bytes, torch_load_bytes
from kuberl.trainer.replay.nstep import TRANSITION_KEYS

LEARNER_FILE = "sac_learner.pt"


# -- the losses (pure) ----------------------------------------------------------------------------
def critic_targets(reward: torch.Tensor, discount: torch.Tensor, next_q1_target: torch.Tensor,
                   next_q2_target: torch.Tensor, next_logp: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """y = reward + discount * (min(Q1', Q2') - alpha * log pi(a'|s')): the soft clipped double-Q target."""
    return reward + discount * (torch.min(next_q1_target, next_q2_target) - alpha * next_logp)


def sac_priorities(q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A transition's priority: the mean of the twin critics' |TD errors| against the shared target."""
    # Both critics are regressed on the sample, so what it still teaches is the sum of their errors (the mean,
    # for the scale of one). The min would drop a sample that one critic still gets wrong; the max would let
    # one critic's noise set the priority alone.
    return (0.5 * ((q1 - targets).abs() + (q2 - targets).abs())).detach()


def critic_loss(q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor,
                weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, |TD errors|): both Q-networks' importance-weighted squared errors, summed; `sac_priorities`."""
    w = torch.ones_like(targets) if weights is None else weights
    loss = (w * (q1 - targets) ** 2).mean() + (w * (q2 - targets) ** 2).mean()
    return loss, sac_priorities(q1, q2, targets)


def actor_loss(logp: torch.Tensor, q1_pi: torch.Tensor, q2_pi: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """mean(alpha * log pi(a~|s) - min(Q1, Q2)(s, a~)) for reparameterised actions a~."""
    return (alpha * logp - torch.min(q1_pi, q2_pi)).mean()


def alpha_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """-mean(log_alpha * (log pi + target_entropy)): alpha grows while the entropy is below the target."""
    return -(log_alpha * (logp + target_entropy).detach()).mean()


def polyak_update(target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], tau: float) -> None:
    """target <- (1 - tau) * target + tau * online, in place."""
    with torch.no_grad():
        for t, o in zip(target, online, strict=True):
            t.lerp_(o, tau)


# -- the learner ----------------------------------------------------------------------------------
class SACLearner:
    """The actor, the twin Q-networks and their targets, log alpha, and one optimizer each."""

    def __init__(self, actor: SquashedGaussianActor, critic: TwinQ, params: SACParams, device: torch.device,
                 bf16: Bf16Setting = False):
        self.params = params
        self.device = device
        self.bf16 = learner_bf16(bf16, device, actor, critic)  # spec.learner.bf16 resolved on this device
        self.actor = actor.to(device)
        self.critic = critic.to(device)
        self.critic_target = copy.deepcopy(self.critic).eval()
        for p in self.critic_target.parameters():
            p.requires_grad_(False)
        action_dim = int(actor.scale.numel())
        self.target_entropy = float(-action_dim if params.target_entropy is None else params.target_entropy)
        self.log_alpha = torch.tensor(float(np.log(params.initial_alpha)), device=device, requires_grad=True)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=params.lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=params.critic_lr)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=params.alpha_lr)
        self.updates = 0
        self._sums: dict[str, float] = {}
        self._stat_count = 0

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.exp().item())

    def _autocast(self) -> Any:
        """The learner's bfloat16 autocast (`spec.learner.bf16`) for the encoders' passes; heads stay float32."""
        return learner_autocast(self.device, self.bf16)

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, parameters: Iterable[torch.Tensor]) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.params.grad_clip is not None:
            nn.utils.clip_grad_norm_(list(parameters), self.params.grad_clip)
        optimizer.step()

    def update(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """One step of the critic, the actor and alpha on a replay sample; |TD errors| back (priorities)."""
        t = to_device({k: batch[k] for k in (*TRANSITION_KEYS, "weights") if k in batch}, self.device)
        obs, action, next_obs = t["obs"], t["action"].float(), t["next_obs"]
        alpha = self.log_alpha.exp().detach()

        # critic: regress both Q-networks on the soft target from the target networks
        with torch.no_grad():
            next_action, next_logp = self.actor.sample(next_obs, autocast=self._autocast)
            next_q1, next_q2 = self.critic_target(next_obs, next_action, self._autocast)
            targets = critic_targets(t["reward"], t["discount"], next_q1, next_q2, next_logp, alpha)
        q1, q2 = self.critic(obs, action, self._autocast)
        q_loss, td_errors = critic_loss(q1, q2, targets, t.get("weights"))
        self._step(self.critic_optimizer, q_loss, self.critic.parameters())

        # actor: reparameterised actions, scored by the critics just updated (their weights get no gradient)
        self.critic.requires_grad_(False)
        pi_action, logp = self.actor.sample(obs, autocast=self._autocast)
        q1_pi, q2_pi = self.critic(obs, pi_action, self._autocast)
        self.critic.requires_grad_(True)
        pi_loss = actor_loss(logp, q1_pi, q2_pi, alpha)
        self._step(self.actor_optimizer, pi_loss, self.actor.parameters())

        # alpha: towards the target entropy
        a_loss = alpha_loss(self.log_alpha, logp.detach(), self.target_entropy)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        a_loss.backward()
        self.alpha_optimizer.step()

        polyak_update(self.critic_target.parameters(), self.critic.parameters(), self.params.tau)
        self.updates += 1
        self._add_stats(criticLoss=q_loss.item(), actorLoss=pi_loss.item(), alphaLoss=a_loss.item(),
                        meanQ=q1.mean().item(), entropy=-logp.mean().item())
        return td_errors.cpu().numpy()

    def _add_stats(self, **values: float) -> None:
        for key, value in values.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._stat_count += 1

    def take_stats(self) -> dict[str, Scalar]:
        """Mean losses, Q, policy entropy since the last call; alpha and the update counter."""
        n = self._stat_count
        stats: dict[str, Scalar] = {key: (self._sums.get(key, 0.0) / n if n else None)
                                 for key in ("criticLoss", "actorLoss", "alphaLoss", "meanQ", "entropy")}
        stats.update(updates=self.updates, updatesTotal=self.updates, alpha=self.alpha, targetEntropy=self.target_entropy,
                     device=str(self.device))
        self._sums = {}
        self._stat_count = 0
        return stats

    def weights(self) -> dict[str, np.ndarray]:
        """The actor's weights: what rollout workers load."""
        return state_dict_to_numpy(self.actor)

    def state_files(self) -> dict[str, bytes]:
        """Checkpoint files: the networks, log alpha, the three optimizers and the update counter."""
        state = {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "criticTarget": self.critic_target.state_dict(), "logAlpha": self.log_alpha.detach().cpu(),
            "actorOptimizer": self.actor_optimizer.state_dict(),
            "criticOptimizer": self.critic_optimizer.state_dict(),
            "alphaOptimizer": self.alpha_optimizer.state_dict(), "updates": self.updates,
        }
        return {LEARNER_FILE: torch_bytes(state)}

    def load_state_files(self, files: dict[str, bytes]) -> None:
        state = torch_load_bytes(files[LEARNER_FILE], self.device)
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["criticTarget"])
        with torch.no_grad():
            self.log_alpha.copy_(state["logAlpha"])
        self.actor_optimizer.load_state_dict(state["actorOptimizer"])
        self.critic_optimizer.load_state_dict(state["criticOptimizer"])
        self.alpha_optimizer.load_state_dict(state["alphaOptimizer"])
        self.updates = int(state["updates"])


def build_sac_learner(observation_space: Any, action_space: Any, params: SACParams, device: torch.device,
                      bf16: Bf16Setting = False) -> SACLearner:
    encoder = EncoderSpec.from_params(params)
    return SACLearner(SquashedGaussianActor(observation_space, action_space, encoder),
                      TwinQ(observation_space, action_space, encoder), params, device, bf16)


__all__ = ["LEARNER_FILE", "SACLearner", "build_sac_learner", "sac_priorities"]
