"""The V-trace learner of IMPALA and APPO: one update, read top to bottom in this file.

`VTraceLearner.update(batch)` on a train batch of whole fragments, time-major [T, B]:
1. one pass of the current model over the observations: the policy's log pi(a|s) and entropy, and V(s)
   (on images both heads sit on one encoder, so that is one encoder pass);
2. V(next_obs): the next row's V(s) inside an episode; a pass of its own only for the last row and truncated
   steps (`bootstrap_rows`, `next_values_from`);
3. the log-probabilities of V-trace's target policy: the current policy itself (IMPALA), or APPO's
   pi_target, a copy of the policy synced every `target_update_interval` updates (right after a sync it is
   the policy bit for bit, so its own pass is skipped);
4. V-trace targets against the behaviour policy that sampled the batch (`kuberl.trainer.learning.vtrace`);
5. the loss, `impala_loss` or `appo_loss` (below, each a function of the same inputs), and one gradient step
   (norms clipped per group: together where the heads share the encoder);
6. APPO: pi_target follows the policy when the interval is up.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from kuberl.api.hyperparams import APPOParams, IMPALAParams
from kuberl.trainer.learners.files import LEARNER_FILE, MODEL_FILE, OPTIMIZER_FILE
from kuberl.trainer.learning.bootstrap import bootstrap_rows, next_values_from
from kuberl.trainer.learning.device import Bf16Setting, learner_autocast, learner_bf16
from kuberl.trainer.learning.vtrace import TraceClips, TraceSteps, VTraceReturns, vtrace
from kuberl.trainer.models.policy_value import PolicyValueNet
from kuberl.trainer.models.weights import torch_bytes, torch_load_bytes

TARGET_FILE = "target_policy.pt"


@dataclass
class Evaluation:
    """The current model on a batch, [T, B] each: log pi(a|s), its entropy, V(s), and V(next_obs)."""

    logp: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor
    next_values: torch.Tensor


@dataclass
class LossTerms:
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    extra: dict[str, torch.Tensor]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def impala_loss(current: Evaluation, behaviour_logp: torch.Tensor, target_logp: torch.Tensor,
                targets: VTraceReturns, mask: torch.Tensor, params: IMPALAParams) -> LossTerms:
    """-log pi(a|s) times the V-trace advantage, plus the critic's squared error to v_s, minus the entropy bonus.
    (The behaviour and target log-probabilities are in the V-trace targets already.)"""
    policy = -masked_mean(current.logp * targets.pg_advantages, mask)
    value = 0.5 * masked_mean((current.values - targets.vs) ** 2, mask)
    entropy = masked_mean(current.entropy, mask)
    return LossTerms(policy + params.vf_coeff * value - params.entropy_coeff * entropy, policy, value, entropy, {})


def appo_loss(current: Evaluation, behaviour_logp: torch.Tensor, target_logp: torch.Tensor,
              targets: VTraceReturns, mask: torch.Tensor, params: APPOParams) -> LossTerms:
    """PPO's clipped surrogate on V-trace advantages (computed against the target policy), the critic's squared
    error to v_s, and the entropy bonus. The ratio is min(mu / pi_target, target_worker_clipping) * pi / mu:
    pi / pi_target unless the behaviour policy mu strayed far from pi_target."""
    is_ratio = torch.exp(behaviour_logp - target_logp).clamp(0.0, params.target_worker_clipping)
    ratio = is_ratio * torch.exp(current.logp - behaviour_logp)
    advantages = targets.pg_advantages
    clip = params.clip_param
    surrogate = torch.minimum(advantages * ratio, advantages * ratio.clamp(1 - clip, 1 + clip))
    policy = -masked_mean(surrogate, mask)
    value = 0.5 * masked_mean((current.values - targets.vs) ** 2, mask)
    entropy = masked_mean(current.entropy, mask)
    with torch.no_grad():
        clip_fraction = masked_mean(((ratio - 1).abs() > clip).float(), mask)
    return LossTerms(policy + params.vf_coeff * value - params.entropy_coeff * entropy, policy, value, entropy,
                     {"clipFraction": clip_fraction})


VTraceLoss = Callable[[Evaluation, torch.Tensor, torch.Tensor, VTraceReturns, torch.Tensor, Any], LossTerms]


class VTraceLearner:
    """A policy-value network, its optimizer and (APPO) the target policy; `update(batch)` is one gradient step."""

    def __init__(self, model: PolicyValueNet, params: IMPALAParams, device: torch.device, *, loss: VTraceLoss,
                 target_update_interval: int | None = None, bf16: Bf16Setting = False):
        self.params = params
        self.device = device
        self.bf16 = learner_bf16(bf16, device, model)  # spec.learner.bf16 resolved on this device
        self.loss_fn = loss
        self.model = model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=params.lr, eps=1e-5, foreach=True)
        self.clips = TraceClips(rho_bar=params.rho_bar, c_bar=params.c_bar, pg_rho_bar=params.pg_rho_bar)
        self.updates = 0
        # APPO's pi_target, synced every `target_update_interval` updates; None: V-trace's target is the policy.
        self.target_interval = target_update_interval
        self.target_policy = (copy.deepcopy(self.model.policy).requires_grad_(False)
                              if target_update_interval is not None else None)
        self.target_syncs = 0
        self.target_is_current = True  # no update since the last sync: pi_target is pi, bit for bit

    def autocast(self) -> Any:
        """bfloat16 autocast for the encoders' passes where `spec.learner.bf16` asks for it (CUDA, or a CPU with
        bfloat16 instructions); the heads, V-trace and the losses run in float32."""
        return learner_autocast(self.device, self.bf16)

    # -- the update, top to bottom -------------------------------------------------------------------
    def update(self, d: dict[str, torch.Tensor]) -> dict[str, float]:
        loss = self.loss(d)
        self.optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        # The gradient's global norm before any clip (the largest group's): whether grad_clip binds at all.
        max_norm = self.params.grad_clip if self.params.grad_clip is not None else float("inf")
        norms = [nn.utils.clip_grad_norm_(group, max_norm, foreach=True) for group in self.model.clip_groups()]
        self.optimizer.step()
        self.updates += 1
        self._follow_target()
        terms = {"policyLoss": loss.policy, "valueLoss": loss.value, "entropy": loss.entropy,
                 "gradNorm": torch.stack(norms).max(), **loss.extra}
        return {key: float(value.detach()) for key, value in terms.items()}

    def loss(self, d: dict[str, torch.Tensor]) -> LossTerms:
        current = self.evaluate(d)
        target_logp = self._target_logp(current, d)
        targets = vtrace(d["logp"], target_logp, current.values.detach(), current.next_values,
                         TraceSteps(d["rewards"], d["terminateds"], d["dones"]), gamma=self.params.gamma,
                         clips=self.clips)
        mask = d["valid"].float()
        loss = self.loss_fn(current, d["logp"], target_logp, targets, mask, self.params)
        loss.extra["meanRho"] = masked_mean(targets.rhos, mask)
        loss.extra["advantageAbsMean"] = masked_mean(targets.pg_advantages.abs(), mask)
        return loss

    def evaluate(self, d: dict[str, torch.Tensor]) -> Evaluation:
        """Steps 1 and 2: log pi(a|s), entropy and V(s) from one pass, and V(next_obs) mostly reused."""
        T, B = d["rewards"].shape
        inputs, values = self.model.evaluate(d["obs"].flatten(0, 1), self.autocast)
        values = values.view(T, B)
        logp, entropy = self.model.policy.log_prob_entropy(inputs, d["actions"].flatten(0, 1))
        with torch.no_grad():
            reuse, compute = bootstrap_rows(d["terminateds"], d["dones"], d["valid"])
            computed = None
            if compute.any():
                computed = self.model.value(d["next_obs"][compute], self.autocast)
            next_values = next_values_from(values.detach(), reuse, computed, compute)
        return Evaluation(logp.view(T, B), entropy.view(T, B), values, next_values)

    def _target_logp(self, current: Evaluation, d: dict[str, torch.Tensor]) -> torch.Tensor:
        """Step 3: the policy's own log-probabilities (IMPALA, and APPO right after a sync), else pi_target's."""
        if self.target_policy is None or self.target_is_current:
            return current.logp.detach()
        with torch.no_grad():
            inputs = self.target_policy(d["obs"].flatten(0, 1), self.autocast)
            target_logp, _ = self.target_policy.log_prob_entropy(inputs, d["actions"].flatten(0, 1))
        return target_logp.view_as(current.logp)

    def _follow_target(self) -> None:
        """Step 6: pi_target becomes the policy every `target_update_interval` updates."""
        if self.target_policy is None or self.target_interval is None:  # IMPALA
            return
        self.target_is_current = self.updates % self.target_interval == 0
        if self.target_is_current:
            self.target_policy.load_state_dict(self.model.policy.state_dict())
            self.target_syncs += 1

    # -- checkpoints ---------------------------------------------------------------------------------
    def state_files(self) -> dict[str, bytes]:
        files = {
            MODEL_FILE: torch_bytes(self.model.state_dict()),
            OPTIMIZER_FILE: torch_bytes(self.optimizer.state_dict()),
            LEARNER_FILE: json.dumps({"updates": self.updates}).encode(),
        }
        if self.target_policy is not None:
            files[TARGET_FILE] = torch_bytes(self.target_policy.state_dict())
        return files

    def load_state_files(self, files: dict[str, bytes]) -> None:
        self.model.load_state_dict(torch_load_bytes(files[MODEL_FILE], self.device))
        if OPTIMIZER_FILE in files:
            self.optimizer.load_state_dict(torch_load_bytes(files[OPTIMIZER_FILE], self.device))
        if LEARNER_FILE in files:
            self.updates = int(json.loads(files[LEARNER_FILE])["updates"])
        if self.target_policy is not None:
            self.target_is_current = TARGET_FILE not in files
            source = (torch_load_bytes(files[TARGET_FILE], self.device) if TARGET_FILE in files
                      else self.model.policy.state_dict())
            self.target_policy.load_state_dict(source)


__all__ = ["Evaluation", "LossTerms", "VTraceLearner", "appo_loss", "impala_loss", "masked_mean"]
