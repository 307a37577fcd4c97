"""PPO's clipped objective and clipped value loss against values worked out by hand."""

import math

import pytest
import torch

from kuberl.api.hyperparams import PPOParams
from kuberl.trainer.learners.ppo import Current, Sampled, ppo_loss


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def loss_of(new_logp, old_logp, advantages, values, old_values, returns, entropy, **coefficients):
    return ppo_loss(Current(new_logp, entropy, values), Sampled(old_logp, old_values, advantages, returns),
                    PPOParams(**coefficients))


def test_clipped_surrogate_takes_the_pessimistic_term() -> None:
    # ratios 1.5 (advantage +1, clipped to 1.2) and 0.5 (advantage -1, clipped to 0.8: max(0.5, 0.8) = 0.8)
    new_logp = t(math.log(1.5), math.log(0.5))
    old_logp = t(0.0, 0.0)
    advantages = t(1.0, -1.0)
    zeros = t(0.0, 0.0)
    loss = loss_of(new_logp, old_logp, advantages, zeros, zeros, zeros, zeros, clip_param=0.2,
                    vf_clip_param=None, vf_coeff=0.0, entropy_coeff=0.0)
    # per-sample: max(-1.5, -1.2) = -1.2 ; max(0.5, 0.8) = 0.8 ; mean = -0.2
    assert loss.policy.item() == pytest.approx(-0.2)
    assert loss.clip_fraction.item() == pytest.approx(1.0)


def test_ratio_inside_the_clip_range_is_the_plain_surrogate() -> None:
    loss = loss_of(t(math.log(1.1)), t(0.0), t(2.0), t(0.0), t(0.0), t(0.0), t(0.0), clip_param=0.2,
                    vf_clip_param=None, vf_coeff=0.0, entropy_coeff=0.0)
    assert loss.policy.item() == pytest.approx(-2.2)
    assert loss.clip_fraction.item() == 0.0
    # approx KL = (r - 1) - log r
    assert loss.approx_kl.item() == pytest.approx(0.1 - math.log(1.1))


def test_value_clipping_keeps_the_larger_error() -> None:
    values, old_values, returns = t(3.0, 0.5), t(0.0, 0.0), t(3.0, 2.0)
    zeros = t(0.0, 0.0)
    loss = loss_of(zeros, zeros, zeros, values, old_values, returns, zeros, clip_param=0.2,
                    vf_clip_param=1.0, vf_coeff=0.5, entropy_coeff=0.0)
    # sample 0: unclipped (3-3)^2 = 0, clipped value 1 -> (1-3)^2 = 4 -> 4
    # sample 1: unclipped (0.5-2)^2 = 2.25, clipped value 0.5 -> 2.25 -> 2.25
    assert loss.value.item() == pytest.approx(0.5 * (4.0 + 2.25) / 2)
    assert loss.total.item() == pytest.approx(0.5 * loss.value.item())


def test_entropy_bonus_lowers_the_loss() -> None:
    zeros = t(0.0)
    loss = loss_of(zeros, zeros, zeros, zeros, zeros, zeros, t(0.7), clip_param=0.2, vf_clip_param=None,
                    vf_coeff=0.5, entropy_coeff=0.1)
    assert loss.total.item() == pytest.approx(-0.07)
