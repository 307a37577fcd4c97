"""The multi-agent rollout worker on RelayEnv: agents that leave early and join late, per-agent ends, per-policy
batches, and GAE that stops where each agent's own trajectory does."""

from __future__ import annotations

import numpy as np
import pytest

from kuberl.trainer.learning.gae import compute_gae
from kuberl.trainer.multiagent.envs import agent_spaces
from kuberl.trainer.multiagent.segments import Segment, assign_columns, pack
from kuberl.trainer.sampling.policies import PPOPolicyFactory
from kuberl_testing.multi_agent_workers import RELAY, relay_worker


def test_segments_share_a_column_only_when_they_do_not_overlap() -> None:
    segments = [Segment("a", 0, 0), Segment("b", 0, 0), Segment("c", 0, 2), Segment("a", 0, 8)]
    for segment, rows in zip(segments, (3, 8, 6, 2), strict=True):
        for _ in range(rows):
            segment.add(np.zeros(1), 0, {}, 1.0, False, False, np.zeros(1))
    columns, width = assign_columns(segments)
    assert (columns, width) == ([0, 1, 2, 0], 3)
    data = pack(segments, 10)
    assert data["valid"][:, 0].tolist() == [True] * 3 + [False] * 5 + [True] * 2
    assert data["valid"][:, 2].tolist() == [False] * 2 + [True] * 6 + [False] * 2


def test_agents_leaving_and_joining_are_cut_where_they_leave_and_start_where_they_join() -> None:
    worker = relay_worker(None)
    batch = worker.sample()
    data = batch.policy_batches["shared"].data
    # runner_0: rows 0-2, terminated; runner_1: 0-7 and late_0: 2-7, truncated; a new episode from row 8.
    assert data["valid"].shape == (10, 3)
    assert data["valid"][:, 0].tolist() == [True] * 3 + [False] * 5 + [True] * 2
    assert data["valid"][:, 2].tolist() == [False] * 2 + [True] * 6 + [False] * 2
    assert np.flatnonzero(data["terminateds"][:, 0]).tolist() == [2]
    assert np.flatnonzero(data["truncateds"][:, 1]).tolist() == [7]
    assert np.flatnonzero(data["truncateds"][:, 2]).tolist() == [7]
    assert not data["terminateds"][8:].any() and not data["truncateds"][8:].any()  # cut by the fragment, not done
    late_obs = data["obs"][2:8, 2]
    assert (late_obs[:, 2] == 1.0).all()  # the late agent's own observations
    assert batch.env_steps == 10 and batch.agent_steps == {"shared": 3 + 8 + 6 + 2 + 2}
    (episode,) = batch.episodes
    assert episode["length"] == 8 and episode["return"] == 3 + 8 + 6
    assert {a: e["return"] for a, e in episode["agents"].items()} == {"runner_0": 3, "runner_1": 8, "late_0": 6}
    assert {e["policy"] for e in episode["agents"].values()} == {"shared"}


def test_gae_stops_at_each_agents_own_end() -> None:
    data = relay_worker(None).sample().policy_batches["shared"].data
    dones = data["terminateds"] | data["truncateds"] | ~data["valid"]
    zeros = np.zeros(data["rewards"].shape, np.float32)
    advantages, _ = compute_gae(data["rewards"], zeros, zeros, data["terminateds"], dones, 1.0, 1.0)
    # Column 0 holds runner_0 (3 steps, then gone) and, later, the next episode's runner_0 (2 steps).
    assert advantages[0, 0] == 3.0  # its own three rewards, nothing of the agent after it in the column
    assert advantages[8, 0] == 2.0
    assert advantages[2, 2] == 6.0  # late_0 from the step it joined


def test_each_policy_gets_its_own_agents_steps() -> None:
    worker = relay_worker([{"name": "runners", "agents": ["runner_*"]}, {"name": "late", "agents": ["late_0"]}])
    batch = worker.sample()
    runners, late = batch.policy_batches["runners"].data, batch.policy_batches["late"].data
    assert runners["valid"].sum() == 3 + 8 + 2 + 2 and late["valid"].sum() == 6
    assert (runners["obs"][runners["valid"]][:, 2] == 0).all() and (late["obs"][late["valid"]][:, 2] == 1).all()
    assert batch.agent_steps == {"runners": 15, "late": 6}
    assert batch.episodes[0]["agents"]["late_0"]["policy"] == "late"


def test_agent_id_feature_appends_the_agents_index() -> None:
    worker = relay_worker(None, id_feature=True)
    data = worker.sample().policy_batches["shared"].data
    assert data["obs"].shape[-1] == 3 + 3
    one_hots = data["obs"][data["valid"]][:, 3:]
    assert (one_hots.sum(axis=1) == 1).all()
    assert data["obs"][2:8, 2, 5].tolist() == [1.0] * 6  # late_0 is the third possible agent


def test_traces_record_agent_ids() -> None:
    (episode,) = relay_worker(None, record_steps=True).sample().episodes
    agents = [step["agent"] for step in episode["steps"]]
    assert agents.count("runner_0") == 3 and agents.count("late_0") == 6 and agents.count("runner_1") == 8


@pytest.mark.parametrize("envs", [1, 3])
def test_ppo_policies_sample_every_agent_of_every_env(envs: int) -> None:
    from kuberl.api.hyperparams import PPOParams

    worker = relay_worker([{"name": "runners", "agents": ["runner_*"]}, {"name": "late", "agents": ["late_0"]}],
                          envs=envs, fragment=16, factory=PPOPolicyFactory.from_params(PPOParams()))
    from kuberl.trainer.models.actor_critic import ActorCritic
    from kuberl.trainer.models.weights import state_dict_to_numpy

    spaces = agent_spaces(RELAY)
    actor = ActorCritic(spaces.observation_spaces["runner_0"], spaces.action_spaces["runner_0"], [8], "tanh").actor
    worker.set_weights({"runners": state_dict_to_numpy(actor), "late": state_dict_to_numpy(actor)}, 3)
    batch = worker.sample()
    assert batch.env_steps == 16 * envs and batch.policy_version == 3
    for name, policy_batch in batch.policy_batches.items():
        valid = policy_batch.data["valid"]
        assert policy_batch.env_steps == valid.sum() == batch.agent_steps[name]
        assert np.isfinite(policy_batch.data["logp"][valid]).all() and (policy_batch.data["logp"][valid] < 0).all()
    worker.stop()
