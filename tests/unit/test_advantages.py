"""GAE against values worked out by hand."""

import numpy as np
import pytest

from kuberl.trainer.learning.gae import compute_gae


def column(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64).reshape(-1, 1)


def test_gae_single_env_bootstraps_from_the_last_next_value() -> None:
    rewards = column(1.0, 1.0)
    values = column(0.5, 0.4)
    next_values = column(0.4, 0.3)
    no = column(0, 0).astype(bool)
    adv, ret = compute_gae(rewards, values, next_values, no, no, gamma=0.9, lam=0.8)
    # delta1 = 1 + 0.9*0.3 - 0.4 = 0.87 ; delta0 = 1 + 0.9*0.4 - 0.5 = 0.86
    # adv1 = 0.87 ; adv0 = 0.86 + 0.9*0.8*0.87 = 1.4864
    assert adv[:, 0] == pytest.approx([1.4864, 0.87], abs=1e-6)
    assert ret[:, 0] == pytest.approx([1.4864 + 0.5, 0.87 + 0.4], abs=1e-6)


def test_terminated_step_bootstraps_nothing_and_cuts_the_chain() -> None:
    rewards = column(1.0, 2.0, 3.0)
    values = column(1.0, 1.0, 1.0)
    next_values = column(5.0, 7.0, 2.0)
    terminated = column(0, 1, 0).astype(bool)
    adv, _ = compute_gae(rewards, values, next_values, terminated, terminated, gamma=0.5, lam=1.0)
    # t=2: 3 + 0.5*2 - 1 = 3 ; t=1 (terminated): 2 - 1 = 1 (no bootstrap, no chain) ; t=0: 1 + 2.5 - 1 + 0.5*1 = 3
    assert adv[:, 0] == pytest.approx([3.0, 1.0, 3.0])


def test_truncated_step_bootstraps_from_its_final_observation_but_cuts_the_chain() -> None:
    rewards = column(1.0, 1.0)
    values = column(0.0, 0.0)
    next_values = column(4.0, 10.0)
    terminated = column(0, 0).astype(bool)
    dones = column(1, 0).astype(bool)  # step 0 was truncated: its episode ended but the state had value 4
    adv, _ = compute_gae(rewards, values, next_values, terminated, dones, gamma=0.5, lam=1.0)
    assert adv[:, 0] == pytest.approx([1.0 + 0.5 * 4.0, 1.0 + 0.5 * 10.0])


def test_envs_are_independent_columns() -> None:
    rewards = np.array([[1.0, 0.0], [1.0, 1.0]])
    values = np.zeros((2, 2))
    next_values = np.zeros((2, 2))
    dones = np.zeros((2, 2), dtype=bool)
    adv, _ = compute_gae(rewards, values, next_values, dones, dones, gamma=1.0, lam=1.0)
    assert adv.tolist() == [[2.0, 1.0], [1.0, 1.0]]
