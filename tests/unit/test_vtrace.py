"""V-trace against a step-by-step reference written from the paper's sum (not its recursion), on small hand-made
trajectories: one episode, an episode that terminates inside the fragment, a truncated one that bootstraps, and a
row that is no transition (a native vector env's reset step)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kuberl.trainer.learning.gae import compute_gae
from kuberl.trainer.learning.vtrace import TraceClips, TraceSteps, vtrace


def run_vtrace(mu, pi, rewards, values, next_values, terminateds, dones, *, gamma, **clips):
    """vtrace() with the trajectory's tensors in the order the reference takes them."""
    return vtrace(mu, pi, values, next_values, TraceSteps(rewards, terminateds, dones), gamma=gamma,
                  clips=TraceClips(**clips))


def reference_vtrace(mu_logp, pi_logp, rewards, values, next_values, terminateds, dones, gamma, rho_bar, c_bar,
                     pg_rho_bar):
    """One env's trajectory as Python lists: v_s = V(x_s) + sum_t gamma^(t-s) (prod_{i<t} c_i) delta_t, t up to the
    episode's end or the fragment's last row."""
    T = len(rewards)
    rho = [math.exp(p - m) for p, m in zip(pi_logp, mu_logp, strict=True)]
    clipped = [min(rho_bar, r) for r in rho]
    c = [min(c_bar, r) for r in rho]

    def delta(t):
        bootstrap = 0.0 if terminateds[t] else gamma * next_values[t]
        return clipped[t] * (rewards[t] + bootstrap - values[t])

    vs = []
    for s in range(T):
        total, weight, t = 0.0, 1.0, s
        while True:
            total += weight * delta(t)
            if dones[t] or t == T - 1:
                break
            weight *= gamma * c[t]
            t += 1
        vs.append(values[s] + total)
    advantages = []
    for s in range(T):
        next_v = vs[s + 1] if s + 1 < T and not dones[s] else next_values[s]
        bootstrap = 0.0 if terminateds[s] else gamma * next_v
        advantages.append(min(pg_rho_bar, rho[s]) * (rewards[s] + bootstrap - values[s]))
    return vs, advantages


# Each case: rewards, V(obs_t), V(next_obs_t), terminated, truncated, valid. Where no episode ends at t,
# V(next_obs_t) = V(obs_{t+1}).
CASES = {
    "one episode": (
        [1.0, 0.5, -1.0, 2.0], [0.3, 0.2, 0.9, -0.4], [0.2, 0.9, -0.4, 0.7],
        [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1],
    ),
    "terminated inside": (
        [1.0, 1.0, 1.0, 1.0, 1.0], [2.0, 1.5, 0.7, 3.0, 2.5], [1.5, 0.7, 5.0, 2.5, 2.2],
        [0, 0, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1],
    ),
    "truncated inside bootstraps": (
        [0.0, 1.0, 2.0, -1.0, 0.5], [1.0, 1.2, 0.8, 0.1, 0.6], [1.2, 0.8, 4.0, 0.6, 0.9],
        [0, 0, 0, 0, 0], [0, 0, 1, 0, 0], [1, 1, 1, 1, 1],
    ),
    "reset row and two ends": (
        [1.0, 3.0, 0.0, 1.0, 2.0, 1.0], [0.5, 0.4, 9.0, 0.2, 0.1, 0.3], [0.4, 1.0, 0.2, 0.1, 0.3, 0.0],
        [0, 1, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0], [1, 1, 0, 1, 1, 1],
    ),
}


def _tensors(case, mu, pi):
    rewards, values, next_values, term, trunc, valid = (np.asarray(x, dtype=np.float64) for x in case)
    dones = (term > 0) | (trunc > 0) | (valid == 0)
    col = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64))[:, None]  # noqa: E731 - [T] -> [T, 1]
    return (col(mu), col(pi), col(rewards), col(values), col(next_values), col(term > 0), col(dones)), dones


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("bars", [(1.0, 1.0, 1.0), (0.8, 0.5, 1.2), (10.0, 10.0, 10.0)])
def test_vtrace_matches_the_step_by_step_reference(name, bars) -> None:
    case = CASES[name]
    T = len(case[0])
    rng = np.random.default_rng(len(name))
    mu = np.log(rng.uniform(0.1, 0.9, T))
    pi = mu + rng.normal(0.0, 0.6, T)  # ratios on both sides of 1, so the clipping matters
    rho_bar, c_bar, pg_rho_bar = bars
    tensors, dones = _tensors(case, mu, pi)
    out = run_vtrace(*tensors, gamma=0.9, rho_bar=rho_bar, c_bar=c_bar, pg_rho_bar=pg_rho_bar)
    expected_vs, expected_adv = reference_vtrace(
        list(mu), list(pi), case[0], case[1], case[2], case[3], list(dones), 0.9, rho_bar, c_bar, pg_rho_bar
    )
    np.testing.assert_allclose(out.vs[:, 0].numpy(), expected_vs, rtol=1e-10)
    np.testing.assert_allclose(out.pg_advantages[:, 0].numpy(), expected_adv, rtol=1e-10)
    np.testing.assert_allclose(out.rhos[:, 0].numpy(), np.exp(pi - mu), rtol=1e-10)


def test_terminated_step_target_is_its_reward_and_truncated_step_bootstraps() -> None:
    rewards, values, next_values, term, trunc, valid = CASES["terminated inside"]
    tensors, _ = _tensors(CASES["terminated inside"], np.zeros(5), np.zeros(5))
    vs = run_vtrace(*tensors, gamma=0.9).vs[:, 0]
    assert vs[2].item() == pytest.approx(1.0)  # terminated: r only, V(next_obs) = 5.0 ignored
    tensors, _ = _tensors(CASES["truncated inside bootstraps"], np.zeros(5), np.zeros(5))
    vs = run_vtrace(*tensors, gamma=0.9).vs[:, 0]
    assert vs[2].item() == pytest.approx(2.0 + 0.9 * 4.0)  # truncated: r + gamma V(final obs)
    assert vs[4].item() == pytest.approx(0.5 + 0.9 * 0.9)  # the last row bootstraps from V(next_obs)


def test_on_policy_vtrace_is_the_lambda_one_return_of_gae() -> None:
    """With pi = mu every ratio is 1: v_s is the bootstrapped n-step return GAE(lambda=1) gives, batched over envs."""
    rng = np.random.default_rng(3)
    T, N = 7, 3
    rewards = rng.normal(size=(T, N))
    values = rng.normal(size=(T, N))
    next_values = np.vstack([values[1:], rng.normal(size=(1, N))])
    term = np.zeros((T, N), dtype=bool)
    trunc = np.zeros((T, N), dtype=bool)
    term[2, 0] = True
    trunc[4, 1] = True
    next_values[2, 0] = 7.0  # ignored: terminated
    next_values[4, 1] = -3.0  # the truncated episode's final observation's value
    dones = term | trunc
    _, returns = compute_gae(rewards, values, next_values, term, dones, 0.95, 1.0)
    logp = torch.zeros(T, N, dtype=torch.float64)
    t = lambda x: torch.as_tensor(x)  # noqa: E731
    out = run_vtrace(logp, logp, t(rewards), t(values), t(next_values), t(term), t(dones), gamma=0.95)
    np.testing.assert_allclose(out.vs.numpy(), returns, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), rewards + 0.95 * np.where(
        term, 0.0, np.where(dones, next_values, np.vstack([out.vs.numpy()[1:], next_values[-1:]]))) - values,
        rtol=1e-10)


def test_clipping_bounds_the_correction_of_a_far_off_policy_step() -> None:
    """A step pi made 20x likelier than mu counts at most rho_bar times its TD error."""
    mu = torch.log(torch.tensor([[0.05]], dtype=torch.float64))
    pi = torch.log(torch.tensor([[1.0]], dtype=torch.float64))
    args = (torch.tensor([[1.0]]).double(), torch.tensor([[0.0]]).double(), torch.tensor([[0.0]]).double(),
            torch.tensor([[True]]), torch.tensor([[True]]))
    assert run_vtrace(mu, pi, *args, gamma=0.9, rho_bar=1.0).vs.item() == pytest.approx(1.0)
    assert run_vtrace(mu, pi, *args, gamma=0.9, rho_bar=None).vs.item() == pytest.approx(20.0)
    assert run_vtrace(mu, pi, *args, gamma=0.9, pg_rho_bar=2.0).pg_advantages.item() == pytest.approx(2.0)


def test_bootstrap_rows_reuse_the_next_row_inside_an_episode_only() -> None:
    from kuberl.trainer.learning.bootstrap import bootstrap_rows, next_values_from

    # env 0: a truncation at t=1, then a reset row (no transition) at t=2; env 1: a termination at t=0.
    terminateds = torch.tensor([[False, True], [False, False], [False, False], [False, False]])
    truncateds = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    valid = torch.tensor([[True, True], [True, True], [False, True], [True, True]])
    dones = terminateds | truncateds | ~valid
    reuse, compute = bootstrap_rows(terminateds, dones, valid)
    assert reuse.tolist() == [[True, False], [False, True], [False, True], [False, False]]
    assert compute.tolist() == [[False, False], [True, False], [False, False], [True, True]]
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    computed = torch.tensor([30.0, 70.0, 80.0])  # V(next_obs) of the compute rows, in row-major order
    next_values = next_values_from(values, reuse, computed, compute)
    assert next_values.tolist() == [[3.0, 0.0], [30.0, 6.0], [0.0, 8.0], [70.0, 80.0]]
