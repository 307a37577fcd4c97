"""spec.multiAgent: the mapping rule and what validation refuses, each error naming its field."""

from __future__ import annotations

import copy

import pytest

from kuberl.api.field_errors import ManifestError
from kuberl.api.multiagent import mapping_errors, policies_of, policies_to_train, policy_config, policy_for
from kuberl.api.types import PolicySpec
from kuberl.api.validation import validate_document

BASE = {
    "apiVersion": "kuberl.io/v1alpha1",
    "kind": "RLExperiment",
    "metadata": {"name": "ma"},
    "spec": {"algorithm": "ppo", "env": {"id": "mpe2:simple_adversary_v3"}, "config": {"lr": 0.001},
             "stop": {"timesteps": 1000}},
}


def manifest(multi_agent: dict | None) -> dict:
    doc = copy.deepcopy(BASE)
    if multi_agent is not None:
        doc["spec"]["multiAgent"] = multi_agent
    return doc


def errors_of(doc: dict) -> dict[str, str]:
    with pytest.raises(ManifestError) as caught:
        validate_document(doc)
    return {e.path: e.message for e in caught.value.errors}


def test_exact_names_win_over_patterns_and_patterns_go_in_order() -> None:
    policies = [PolicySpec(name="everyone", agents=["*"]), PolicySpec(name="adversaries", agents=["adversary_*"]),
                PolicySpec(name="lead", agents=["agent_0"])]
    assert policy_for("agent_0", policies) == "lead"  # exact, though "*" comes first
    assert policy_for("adversary_0", policies) == "everyone"  # the first pattern that matches
    assert policy_for("adversary_0", policies[1:]) == "adversaries"
    assert policy_for("agent_1", policies[1:]) is None


def test_no_multi_agent_is_one_shared_policy_for_every_agent() -> None:
    experiment = validate_document(manifest(None))
    (shared,) = policies_of(experiment.spec)
    assert shared.name == "shared" and policy_for("anyone_7", [shared]) == "shared"
    assert policies_to_train(experiment.spec) == ["shared"]


def test_an_agent_without_a_policy_and_a_policy_without_agents_are_named() -> None:
    policies = [PolicySpec(name="adv", agents=["adversary_*"]), PolicySpec(name="ghost", agents=["nobody"])]
    errors = dict(mapping_errors(["adversary_0", "agent_0", "agent_1"], policies, configured=True))
    assert "'agent_0', 'agent_1'" in errors["spec.multiAgent.policies"]
    assert "'ghost' serves none" in errors["spec.multiAgent.policies[1].agents"]


def test_policy_config_and_model_override_spec_config() -> None:
    experiment = validate_document(manifest({"policies": [
        {"name": "a", "agents": ["*"], "config": {"lr": 0.01}, "model": {"hidden": [32], "convHidden": [128]}}]}))
    config = policy_config(experiment.spec, experiment.spec.multi_agent.policies[0])
    assert config["lr"] == 0.01 and config["hidden"] == [32] and config["model"] == {"hidden": [128]}


@pytest.mark.parametrize(("multi_agent", "path", "words"), [
    ({"policies": [{"name": "a", "agents": ["x"]}, {"name": "a", "agents": ["y"]}]},
     "spec.multiAgent.policies[1].name", "also the name of policies[0]"),
    ({"policies": [{"name": "a", "agents": ["x"]}], "policiesToTrain": ["b"]},
     "spec.multiAgent.policiesToTrain[0]", "no policy is named 'b'"),
    ({"policies": [{"name": "a", "agents": ["x"]}, {"name": "b", "agents": ["x"]}]},
     "spec.multiAgent.policies[1].agents[0]", "already served by policy 'a'"),
    ({"policies": [{"name": "a", "agents": ["x"], "config": {"lr": -1}}]},
     "spec.multiAgent.policies[0].config.lr", "must be > 0"),
    ({"policies": [{"name": "a", "agents": ["x"], "config": {"lrr": 0.1}}]},
     "spec.multiAgent.policies[0].config.lrr", "unknown field"),
    ({"policies": [{"name": "a", "agents": ["x"], "config": {"seed": 3}}]},
     "spec.multiAgent.policies[0].config.seed", "spec.config.seed"),
    ({"policies": [{"name": "a", "agents": []}]}, "spec.multiAgent.policies[0].agents", "at least 1"),
    ({"policies": [{"name": "Bad Name", "agents": ["x"]}]}, "spec.multiAgent.policies[0].name",
     "must be lowercase letters, digits, '-' and '_', starting and ending with a letter or digit, got "
     "'Bad Name'"),
    ({"polices": []}, "spec.multiAgent.polices", "did you mean 'policies'"),
])
def test_validation_names_the_field(multi_agent: dict, path: str, words: str) -> None:
    errors = errors_of(manifest(multi_agent))
    assert path in errors, errors
    assert words in errors[path]


@pytest.mark.parametrize("algorithm", ["impala", "appo"])
def test_run_wide_vtrace_settings_are_refused_in_a_policys_config(algorithm: str) -> None:
    """One iteration, one fragment queue and the workers' sample calls serve every policy: a policy's own
    value was read from nowhere."""
    doc = manifest({"policies": [{"name": "a", "agents": ["*"], "config": {
        "minIterationSeconds": 6.0, "learnerQueueSize": 3, "requestsPerWorker": 5, "lr": 0.01}}]})
    doc["spec"]["algorithm"] = algorithm
    errors = errors_of(doc)
    for key in ("minIterationSeconds", "learnerQueueSize", "requestsPerWorker"):
        assert f"set spec.config.{key}" in errors.pop(f"spec.multiAgent.policies[0].config.{key}")
    assert errors == {}
    doc["spec"]["config"] = {"minIterationSeconds": 6.0, "learnerQueueSize": 3, "requestsPerWorker": 5}
    doc["spec"]["multiAgent"]["policies"][0]["config"] = {"lr": 0.01}
    assert validate_document(doc).spec.config["learnerQueueSize"] == 3


def test_a_policys_key_of_another_algorithm_names_whose_it_is() -> None:
    policy = {"name": "a", "agents": ["*"], "config": {"learnerQueueSize": 3}}
    errors = errors_of(manifest({"policies": [policy]}))
    assert errors == {"spec.multiAgent.policies[0].config.learnerQueueSize":
                      "'learnerQueueSize' is not a hyperparameter of ppo (it is one of impala and appo's)"}
