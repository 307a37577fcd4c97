"""APPO (algorithm "appo"): IMPALA's asynchronous sampling and V-trace targets with PPO's clipped surrogate,
as RLlib defines it after IMPACT (Luo et al., 2020).

A target policy pi_target, a copy of the policy synced every `target_update_interval` updates, anchors
the ratio: V-trace runs with pi_target as its target policy, and the surrogate's ratio is
min(mu / pi_target, target_worker_clipping) * pi / mu (pi / pi_target unless mu strayed far), clipped to
[1 - clip_param, 1 + clip_param] as in PPO. Each train batch is learned from `batch_reuse` times while
`buffer_batches` of them wait in the learner (RLlib's circular buffer, N=4 and K=2).

The update reads top to bottom in `kuberl.trainer.learners.vtrace` (`VTraceLearner.update` with `appo_loss`);
the sampling, the buffer and the policy-lag accounting are IMPALA's (`kuberl.trainer.algorithms.impala`).
"""

from __future__ import annotations

from kuberl.api.hyperparams import APPOParams
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.impala import IMPALA
from kuberl.trainer.learners.vtrace import VTraceLearner, appo_loss
from kuberl.trainer.models.policy_value import PolicyValueNet


class APPOConfig(AlgorithmConfig):
    algorithm = "appo"

    def algorithm_class(self) -> type[APPO]:
        return APPO


class APPO(IMPALA):
    params: APPOParams

    def make_learner(self, model: PolicyValueNet) -> VTraceLearner:
        return VTraceLearner(model, self.params, self.device, loss=appo_loss,
                             target_update_interval=self.params.target_update_interval, bf16=self.spec.learner.bf16)


__all__ = ["APPO", "APPOConfig"]
