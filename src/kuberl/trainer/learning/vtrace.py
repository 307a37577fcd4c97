"""V-trace off-policy value targets (Espeholt et al., 2018, section 4.1) on [T, N] rollout tensors. Pure torch.

    v_s = V(x_s) + sum_{t>=s} gamma^(t-s) (prod_{s<=i<t} c_i) delta_t,   delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),   c_i = lambda min(c_bar, pi(a_i|x_i) / mu(a_i|x_i))

computed backwards as v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1})). The policy-gradient
advantage of step s is rho_pg_s (r_s + gamma v_{s+1} - V(x_s)), with rho_pg clipped at pg_rho_bar.

Episode ends inside a fragment follow `kuberl.trainer.learning.gae.compute_gae`'s convention:
next_values[t] = V(next_obs_t), the observation the step actually led to. A terminated step bootstraps
nothing; a truncated one bootstraps from V(next_obs_t); `dones` (terminated, truncated, or a row that is
no transition at all) stops the trace from reaching the next row, and the last row bootstraps from
next_values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class VTraceReturns:
    vs: torch.Tensor  # value targets v_s, [T, N]
    pg_advantages: torch.Tensor  # rho_pg_s (r_s + gamma v_{s+1} - V(x_s)), [T, N]
    rhos: torch.Tensor  # the unclipped importance ratios pi / mu, [T, N]


@dataclass(frozen=True)
class TraceSteps:
    """What the trajectory did, time-major [T, N]: the rewards, where an episode terminated, and where the
    trace stops (terminated, truncated, or a row that is no transition)."""

    rewards: torch.Tensor
    terminateds: torch.Tensor
    dones: torch.Tensor


@dataclass(frozen=True)
class TraceClips:
    """The truncation levels of the importance ratios (None clips nothing) and the trace's lambda."""

    rho_bar: float | None = 1.0
    c_bar: float | None = 1.0
    pg_rho_bar: float | None = 1.0
    lam: float = 1.0


@torch.no_grad()
def vtrace(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
           steps: TraceSteps, *, gamma: float, clips: TraceClips = TraceClips()) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages; every input is time-major [T, N]."""
    rewards, terminateds, dones = steps.rewards, steps.terminateds, steps.dones
    rho_bar, c_bar, pg_rho_bar, lam = clips.rho_bar, clips.c_bar, clips.pg_rho_bar, clips.lam
    rhos = torch.exp(target_logp - behaviour_logp)
    clipped_rhos = rhos if rho_bar is None else rhos.clamp(max=rho_bar)
    cs = lam * (rhos if c_bar is None else rhos.clamp(max=c_bar))
    discounts = gamma * (1.0 - terminateds.to(values.dtype))
    carry = 1.0 - dones.to(values.dtype)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)

    acc = torch.zeros_like(values[0])
    vs_minus_v = torch.empty_like(values)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + gamma * carry[t] * cs[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v

    # v_{s+1}: the next row's target inside an episode, V(next_obs) past an episode's end and after the last row.
    next_vs = next_values.clone()
    next_vs[:-1] = torch.where(carry[:-1].bool(), vs[1:], next_values[:-1])
    pg_rhos = rhos if pg_rho_bar is None else rhos.clamp(max=pg_rho_bar)
    pg_advantages = pg_rhos * (rewards + discounts * next_vs - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages, rhos=rhos)

