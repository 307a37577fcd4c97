"""An agent that leaves a multi-agent env without a termination or truncation flag: its segment is cut where it
left, and it bootstraps from what the env gave it on leaving (its last observation), or from nothing."""

from __future__ import annotations

import numpy as np

from kuberl.trainer.multiagent.envs import agent_spaces
from kuberl.trainer.sampling.policies import PPOPolicyFactory
from kuberl.trainer.sampling.rollout_worker import WorkerConfig
from kuberl_testing.multi_agent_workers import multi_agent_worker

LEAVING = "kuberl_testing.leaving_agents_env:leaving_agents_env"


def sample(fragment: int) -> dict[str, dict[str, np.ndarray]]:
    """Each agent's rows of one fragment (one policy per agent, so each has its own batch)."""
    from kuberl.api.hyperparams import PPOParams

    config = WorkerConfig(env_id=LEAVING, num_envs=1, fragment_length=fragment, seed=1)
    policies = [{"name": agent, "agents": [agent]} for agent in agent_spaces(LEAVING).agents]
    worker = multi_agent_worker(config, policies, factory=PPOPolicyFactory.from_params(PPOParams()))
    try:
        return {name: batch.data for name, batch in worker.sample().policy_batches.items()}
    finally:
        worker.stop()


def test_an_agent_leaving_with_no_observation_bootstraps_from_nothing():
    """`quiet` leaves after 2 steps with no flag and no observation: there is no next state to value, and it earns
    nothing more in this env, so its last row is a termination (no bootstrap), not a truncation valued from the
    observation it acted on."""
    d = sample(4)["quiet"]
    assert d["valid"][:, 0].tolist() == [True, True, False, False]
    assert d["terminateds"][:, 0].tolist() == [False, True, False, False]
    assert not d["truncateds"].any()


def test_an_agent_leaving_with_an_observation_is_truncated_and_bootstraps_from_it():
    """`waving` leaves after 2 steps with no flag but with an observation: it is cut there, truncated, and its
    next observation is the one the env gave it on leaving (step 2's), not the one it acted on."""
    d = sample(4)["waving"]
    assert d["valid"][:, 0].tolist() == [True, True, False, False]
    assert d["truncateds"][:, 0].tolist() == [False, True, False, False]
    assert not d["terminateds"].any()
    assert d["next_obs"][1, 0, 0] == 2.0 and d["obs"][1, 0, 0] == 1.0


def test_an_agent_that_stays_is_cut_by_the_time_limit_as_before():
    d = sample(6)["stayer"]
    assert d["valid"][:, 0].all() and d["truncateds"][:, 0].tolist() == [False] * 5 + [True]
    assert not d["terminateds"].any() and d["next_obs"][5, 0, 0] == 6.0
