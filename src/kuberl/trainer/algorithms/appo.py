"""APPO (algorithm "appo"): IMPALA's asynchronous sampling and V-trace targets with PPO's clipped surrogate,
as RLlib defines it after IMPACT (Luo et al., 2020).

A target policy pi_target, a copy of the policy synced every `target_update_interval` updates, anchors
the ratio: V-trace runs with pi_target as its target policy, and the surrogate's ratio is
min(mu / pi_target, target_worker_clipping) * pi / mu (pi / pi_target unless mu strayed far), clipped to
[1 - clip_param, 1 + clip_param] as in PPO. Each train batch is learned from `batch_reuse` times while
`buffer_batches` of them wait in the learner (RLlib's circular buffer, N=4 and K=2).

The update reads top to bottom in `kuberl.trainer.learners.vtrace` (`VTraceLearner.update` with `appo_loss`);
the sampling is IMPALA's (`kuberl.trainer.algorithms.impala`), the buffer, the reuse and the policy-lag accounting
are the V-trace learner loop's (`kuberl.trainer.algorithms.vtrace_loop`), the same for one agent and for each
policy of a multi-agent run.
"""

from __future__ import annotations

from kuberl.api.hyperparams import APPOParams
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.impala import IMPALA


class APPOConfig(AlgorithmConfig):
    algorithm = "appo"

    def algorithm_class(self) -> type[APPO]:
        return APPO


class APPO(IMPALA):
    """IMPALA with APPO's hyperparameters, from which `vtrace_learner` builds `appo_loss` and the target policy."""

    params: APPOParams


__all__ = ["APPO", "APPOConfig"]
