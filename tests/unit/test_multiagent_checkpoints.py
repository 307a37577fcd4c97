"""Checkpoints of a multi-agent run hold every policy and restore them; a frozen policy does not learn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kuberl.api.validation import validate_document
from kuberl.trainer.algorithms.config import AlgorithmConfig

TWO_POLICIES = [{"name": "runners", "agents": ["runner_*"], "config": {"lr": 0.01}},
                {"name": "late", "agents": ["late_0"], "model": {"hidden": [16]}}]


def build(algorithm: str = "ppo", policies: list[dict] = TWO_POLICIES, **multi_agent: object):
    experiment = validate_document({
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "relay"},
        "spec": {"algorithm": algorithm, "env": {"id": "kuberl_testing.multi_agent_envs:relay_env"},
                 "config": {"seed": 2}, "rollouts": {"workers": 0, "envsPerWorker": 2, "fragmentLength": 16},
                 "stop": {"iterations": 5}, "multiAgent": {"policies": policies, **multi_agent}}})
    return AlgorithmConfig.from_experiment(experiment).build()


def weights(algo, policy: str) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in algo.learners[policy].model.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("algorithm", ["ppo", "appo"])
def test_every_policy_is_saved_and_restored(algorithm: str) -> None:
    with build(algorithm) as trained:
        trained.train()
        trained.train()
        state = trained.get_state()
        assert {"policies/runners/model.pt", "policies/late/model.pt", "multiagent.json"} <= set(state)
        saved = {name: weights(trained, name) for name in ("runners", "late")}
        windows = dict(trained.agent_windows)
    with build(algorithm) as restored:
        assert not same(weights(restored, "runners"), saved["runners"])
        restored.set_state(state)
        assert restored.iteration == 2
        for name in ("runners", "late"):
            assert same(weights(restored, name), saved[name])
        assert {a: list(w) for a, w in restored.agent_windows.items()} == {a: list(w) for a, w in windows.items()}
        assert restored.learners["runners"].optimizer.param_groups[0]["lr"] == 0.01
        restored.train()  # and trains on from there


def test_a_checkpoint_without_a_policy_of_the_manifest_is_refused() -> None:
    with build() as trained:
        trained.train()
        state = trained.get_state()
    with build(policies=[*TWO_POLICIES[:1], {"name": "newcomer", "agents": ["late_0"]}]) as other, \
            pytest.raises(ValueError, match="no policy 'newcomer'"):
        other.set_state(state)


def test_a_policy_left_out_of_policies_to_train_acts_but_does_not_learn() -> None:
    with build(policiesToTrain=["runners"]) as algo:
        late, runners = weights(algo, "late"), weights(algo, "runners")
        result = algo.train()
        assert same(weights(algo, "late"), late) and not same(weights(algo, "runners"), runners)
        assert result["policies"]["late"]["agentSteps"] > 0 and not result["policies"]["late"]["trained"]
        assert "learner" not in result["policies"]["late"]


def test_the_python_builder_configures_the_policies() -> None:
    from kuberl.trainer.algorithms.appo import APPOConfig

    with (APPOConfig().environment("kuberl_testing.multi_agent_envs:relay_env", env_config={"length": 6})
          .multi_agent(policies=TWO_POLICIES, policies_to_train=["late"], agent_id_feature=True)
          .rollouts(envs_per_worker=2, fragment_length=12).debugging(seed=1).build()) as algo:
        assert algo.policy_map.names == ("runners", "late") and algo.trained == ["late"]
        assert algo.policy_spaces["runners"][0].shape == (3 + 2,)  # the one-hot of runner_0 and runner_1
        assert algo.train()["policies"]["late"]["learner"]["updates"] > 0


def test_a_multi_agent_appo_checkpoint_of_an_earlier_kuberl_restores_and_acts_as_it_did() -> None:
    """tests/fixtures/checkpoints/multiagent-appo: 3 iterations of two APPO policies on RelayEnv, written by the
    trainer before the policies' learner loops were the single-agent ones; expected.json holds its spec, counters
    and each policy's greedy actions on fixed observations."""
    root = Path(__file__).parents[1] / "fixtures" / "checkpoints" / "multiagent-appo"
    expected = json.loads((root / "expected.json").read_text())
    experiment = validate_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                    "metadata": {"name": "relay"}, "spec": expected["spec"]})
    with AlgorithmConfig.from_experiment(experiment).build() as algo:
        algo.restore(str(root))
        assert (algo.iteration, algo.timesteps) == (expected["iteration"], expected["timesteps"])
        assert {name: learner.updates for name, learner in algo.learners.items()} == expected["updates"]
        for name, played in expected["actions"].items():
            obs = np.asarray(played["obs"], dtype=np.float32)
            assert algo.compute_policy_actions(name, obs).tolist() == played["actions"]
        assert algo.train()["policies"]["runners"]["learner"]["updatesTotal"] > expected["updates"]["runners"]
