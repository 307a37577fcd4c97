"""End-to-end: a multi-agent experiment (PettingZoo's simple_speaker_listener, a policy per agent, rollout
workers on the worker pod's Ray actors) from the apply to per-policy checkpoints and results in S3; and a mapping
that leaves an agent without a policy, which the head's trainer refuses (InvalidSpec, naming the field)."""

from __future__ import annotations

import pytest
from experiments import RunFiles, tiny_ppo, unique_name

pytestmark = pytest.mark.timeout(600)

SPEAKER_LISTENER = {"id": "mpe2:simple_speaker_listener_v4", "config": {"max_cycles": 25}}
TWO_POLICIES = {"policies": [{"name": "speaker", "agents": ["speaker_0"]},
                             {"name": "listener", "agents": ["listener_*"]}]}


@pytest.mark.backend_agnostic("the operator and pods are PPO's success scenario's; the policies, agents and files "
                               "are the trainer's, which no API server sees")
def test_a_multi_agent_experiment_trains_every_policy_to_success(cluster, experiments):
    name = unique_name("multiagent")
    experiments.apply(tiny_ppo(name, cluster, env=SPEAKER_LISTENER, multiAgent=TWO_POLICIES,
                               rollouts={"fragmentLength": 25}, stop={"timesteps": 400},
                               config={"numEpochs": 2, "minibatchSize": 64}))
    status = experiments.wait_phase(name, "Succeeded", "Failed")
    assert status["phase"] == "Succeeded", experiments.explain(name)
    assert status["timesteps"] >= 400 and status.get("episodeReturnMean") is not None  # the team return

    files = RunFiles(cluster, name)
    last = files.results()[-1]
    assert set(last["policies"]) == {"speaker", "listener"}
    assert all(p["learner"]["updates"] > 0 for p in last["policies"].values())
    assert set(last["agents"]) == {"speaker_0", "listener_0"}
    checkpoint = files.checkpoints()[-1]
    files.verify(checkpoint)
    assert {"policies/speaker/model.pt", "policies/listener/model.pt"} <= set(checkpoint["files"])
    episodes = files.episodes()
    assert episodes and all(set(e["agents"]) == {"speaker_0", "listener_0"} for e in episodes)


def test_an_agent_without_a_policy_fails_as_an_invalid_spec(cluster, experiments):
    name = unique_name("multiagent-unmapped")
    experiments.apply(tiny_ppo(name, cluster, env=SPEAKER_LISTENER,
                               multiAgent={"policies": [{"name": "speaker", "agents": ["speaker_0"]}]}))
    status = experiments.wait_phase(name, "Failed", timeout=300)
    stalled = experiments.condition(name, "Stalled")
    assert stalled.get("reason") == "InvalidSpec", status
    assert "multiAgent.policies" in stalled.get("message", "") and "listener_0" in stalled.get("message", "")
