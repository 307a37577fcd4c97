"""APPO's and IMPALA's losses against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from kuberl.api.hyperparams import APPOParams, IMPALAParams
from kuberl.trainer.learners.vtrace import Evaluation, appo_loss, impala_loss
from kuberl.trainer.learning.vtrace import VTraceReturns


def t(*values: float) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float64)  # [T=1, N]


def targets(vs: torch.Tensor, advantages: torch.Tensor) -> VTraceReturns:
    return VTraceReturns(vs=vs, pg_advantages=advantages, rhos=torch.ones_like(vs))


def current(logp, entropy, values) -> Evaluation:
    return Evaluation(logp=logp, entropy=entropy, values=values, next_values=torch.zeros_like(values))


def loss_of(logp, mu, target, advantages, **kw):
    zeros = torch.zeros_like(advantages)
    defaults = {"clip_param": 0.2, "target_worker_clipping": 2.0, "vf_coeff": 0.0, "entropy_coeff": 0.0}
    return appo_loss(current(logp, zeros, zeros), mu, target, targets(zeros, advantages), torch.ones_like(advantages),
                     APPOParams(**{**defaults, **kw}))


def test_surrogate_ratio_is_pi_over_the_target_policy_and_takes_the_pessimistic_term() -> None:
    # mu differs from pi_target; the ratio is (mu / pi_target) * (pi / mu) = pi / pi_target.
    mu = t(math.log(0.5), math.log(0.5), math.log(0.5))
    target = t(math.log(0.4), math.log(0.4), math.log(0.4))
    pi = t(math.log(0.44), math.log(0.6), math.log(0.2))  # ratios 1.1, 1.5, 0.5
    loss = loss_of(pi, mu, target, t(2.0, 1.0, -1.0))
    # per sample: min(2.2, 2*1.2)=2.2 ; min(1.5, 1.2)=1.2 ; min(-0.5, -0.8)=-0.8 ; loss = -mean
    assert loss.policy.item() == pytest.approx(-(2.2 + 1.2 - 0.8) / 3)
    assert loss.extra["clipFraction"].item() == pytest.approx(2 / 3)


def test_target_worker_clipping_bounds_mu_over_the_target() -> None:
    # mu / pi_target = 0.9 / 0.1 = 9, clipped to 2: ratio = 2 * pi / mu = 2 * 0.45 / 0.9 = 1.0
    loss = loss_of(t(math.log(0.45)), t(math.log(0.9)), t(math.log(0.1)), t(1.0), clip_param=10.0)
    assert loss.policy.item() == pytest.approx(-1.0)
    loss = loss_of(t(math.log(0.45)), t(math.log(0.9)), t(math.log(0.1)), t(1.0), clip_param=10.0,
                   target_worker_clipping=100.0)
    assert loss.policy.item() == pytest.approx(-4.5)  # unclipped: pi / pi_target


def test_a_clipped_sample_gives_no_policy_gradient() -> None:
    logp = t(math.log(0.9), math.log(0.5)).requires_grad_()
    mu = target = t(math.log(0.5), math.log(0.5))
    loss_of(logp, mu, target, t(1.0, 1.0)).total.backward()
    assert logp.grad is not None
    assert logp.grad[0, 0].item() == 0.0  # ratio 1.8 > 1.2 with a positive advantage: clipped
    assert logp.grad[0, 1].item() == pytest.approx(-1.0 / 2)  # d(-mean(A r))/dlogp = -A r / n, r = 1


def test_value_entropy_and_mask_terms() -> None:
    values, vs = t(1.0, 3.0, 100.0), t(2.0, 1.0, 0.0)
    entropy = t(0.5, 0.7, 9.0)
    mask = t(1.0, 1.0, 0.0)  # the last row is no transition: it counts for nothing
    zeros = torch.zeros_like(values)
    loss = appo_loss(current(zeros, entropy, values), zeros, zeros, targets(vs, zeros), mask,
                     APPOParams(clip_param=0.2, target_worker_clipping=2.0, vf_coeff=0.5, entropy_coeff=0.1))
    assert loss.value.item() == pytest.approx(0.5 * (1.0 + 4.0) / 2)
    assert loss.entropy.item() == pytest.approx(0.6)
    assert loss.total.item() == pytest.approx(0.5 * 1.25 - 0.1 * 0.6)


def test_impala_policy_term_is_the_vtrace_advantage_weighted_log_probability() -> None:
    logp = t(math.log(0.25), math.log(0.5)).requires_grad_()
    zeros = torch.zeros_like(logp)
    loss = impala_loss(current(logp, zeros, zeros), zeros, zeros, targets(zeros, t(2.0, -1.0)),
                       torch.ones_like(zeros), IMPALAParams(vf_coeff=0.5, entropy_coeff=0.0))
    assert loss.policy.item() == pytest.approx(-(2.0 * math.log(0.25) - math.log(0.5)) / 2)
    loss.total.backward()
    assert logp.grad is not None
    assert logp.grad.tolist() == [[pytest.approx(-1.0), pytest.approx(0.5)]]
