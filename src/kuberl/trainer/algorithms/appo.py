"""APPO (algorithm "appo"): IMPALA's asynchronous sampling and V-trace targets with PPO's clipped surrogate,
as RLlib defines it after IMPACT (Luo et al., 2020).

A target policy pi_target, a copy of the policy synced every `target_update_interval` updates, anchors
the ratio: V-trace runs with pi_target as its target policy, and the surrogate's ratio is
min(mu / pi_target, target_worker_clipping) * pi / mu (pi / pi_target unless mu strayed far), clipped to
[1 - clip_param, 1 + clip_param] as in PPO. Each train batch is learned from `batch_reuse` times while
`buffer_batches` of them wait in the learner (RLlib's circular buffer, N=4 and K=2).
"""

from __future__ import annotations

import copy

import torch

from kuberl.api.hyperparams import APPOParams
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.impala import IMPALA, LossTerms, masked_mean
from kuberl.trainer.learning.vtrace import VTraceReturns
from kuberl.trainer.models.weights import torch_bytes, torch_load_bytes

TARGET_FILE = "target_policy.pt"


class APPOConfig(AlgorithmConfig):
    algorithm = "appo"

    def algorithm_class(self) -> type[APPO]:
        return APPO


def appo_loss(logp: torch.Tensor, behaviour_logp: torch.Tensor, target_policy_logp: torch.Tensor,
              entropy: torch.Tensor, values: torch.Tensor, targets: VTraceReturns, mask: torch.Tensor, *,
              clip_param: float, target_worker_clipping: float, vf_coeff: float, entropy_coeff: float) -> LossTerms:
    """The clipped surrogate on V-trace advantages (computed against the target policy), the critic's squared
    error to v_s, and the entropy bonus."""
    is_ratio = torch.exp(behaviour_logp - target_policy_logp).clamp(0.0, target_worker_clipping)
    ratio = is_ratio * torch.exp(logp - behaviour_logp)
    advantages = targets.pg_advantages
    surrogate = torch.minimum(advantages * ratio, advantages * ratio.clamp(1 - clip_param, 1 + clip_param))
    policy = -masked_mean(surrogate, mask)
    value = 0.5 * masked_mean((values - targets.vs) ** 2, mask)
    entropy_mean = masked_mean(entropy, mask)
    with torch.no_grad():
        clip_fraction = masked_mean(((ratio - 1).abs() > clip_param).float(), mask)
    return LossTerms(policy + vf_coeff * value - entropy_coeff * entropy_mean, policy, value, entropy_mean,
                     {"clipFraction": clip_fraction})


class APPO(IMPALA):
    params: APPOParams

    def setup(self) -> None:
        super().setup()
        self.target_policy = copy.deepcopy(self.model.policy).requires_grad_(False)
        self.target_syncs = 0
        self.target_is_current = True  # no update since the last sync: pi_target is pi, bit for bit

    def loss(self, d: dict[str, torch.Tensor]) -> LossTerms:
        p = self.params
        inputs, logp, entropy, values, next_values = self.evaluate_batch(d)
        if self.target_is_current:  # the update right after a sync needs no pass of its own
            target_logp = logp.detach()
        else:
            with torch.no_grad():
                with self.autocast():
                    target_inputs = self.target_policy(d["obs"].flatten(0, 1))
                target_logp, _ = self.target_policy.log_prob_entropy(target_inputs.float(), d["actions"].flatten(0, 1))
                target_logp = target_logp.view_as(logp)
        targets = self.targets(target_logp, values, next_values, d)
        mask = d["valid"].float()
        loss = appo_loss(logp, d["logp"], target_logp, entropy, values, targets, mask, clip_param=p.clip_param,
                         target_worker_clipping=p.target_worker_clipping, vf_coeff=p.vf_coeff,
                         entropy_coeff=p.entropy_coeff)
        loss.extra["meanRho"] = masked_mean(targets.rhos, mask)
        return loss

    def after_update(self) -> None:
        self.target_is_current = self.updates % self.params.target_update_interval == 0
        if self.target_is_current:
            self.target_policy.load_state_dict(self.model.policy.state_dict())
            self.target_syncs += 1

    def learner_state(self) -> dict[str, bytes]:
        return {**super().learner_state(), TARGET_FILE: torch_bytes(self.target_policy.state_dict())}

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        super().load_learner_state(files)
        self.target_is_current = TARGET_FILE not in files
        if TARGET_FILE in files:
            self.target_policy.load_state_dict(torch_load_bytes(files[TARGET_FILE], self.device))
        else:
            self.target_policy.load_state_dict(self.model.policy.state_dict())


__all__ = ["APPO", "APPOConfig", "appo_loss"]
