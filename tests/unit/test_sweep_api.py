"""The RLSweep API: validation with field-named errors, the CRD generated from the types, the reference."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kuberl.api.field_errors import ManifestError
from kuberl.api.sweep_crd import build_sweep_crd, render_sweep_chart_crd, render_sweep_crd
from kuberl.api.sweep_reference import render_sweep_reference
from kuberl.api.sweep_validation import load_sweep, validate_sweep_document
from kuberl_testing.schemas import walk_schema

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "sweeps").glob("*.yaml"))
ISSUE_EXAMPLE = """\
apiVersion: kuberl.io/v1alpha1
kind: RLSweep
metadata: {name: cartpole-lr}
spec:
  template: {algorithm: ppo, env: {id: CartPole-v1}, stop: {timesteps: 60000}}
  parameters:
    - {path: config.lr, type: float, low: 0.0001, high: 0.003, log: true}
    - {path: config.entropyCoeff, type: categorical, values: [0.0, 0.01]}
  objective: {metric: episodeReturnMean, goal: maximize}
  search: {algorithm: tpe, seed: 1}       # grid | random | tpe | pbt
  maxTrials: 6
  parallelism: 2
"""


def doc_with(change) -> dict[str, Any]:
    doc = yaml.safe_load(ISSUE_EXAMPLE)
    change(doc["spec"])
    return doc


def errors_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate_sweep_document(doc)
    return [str(e) for e in info.value.errors]


def test_the_issue_example_is_valid():
    sweep = load_sweep(ISSUE_EXAMPLE)
    assert sweep.spec.template.algorithm == "ppo" and sweep.spec.parallelism == 2
    assert sweep.spec.parameters[0].log and sweep.spec.parameters[1].values == [0.0, 0.01]


@pytest.mark.parametrize(("change", "expected"), [
    (lambda s: s["parameters"][0].update(path="config.lrr"),
     "spec.parameters[0].path: 'config.lrr' is not a hyperparameter of ppo (did you mean 'config.lr'?)"),
    (lambda s: s["parameters"][0].update(path="rollouts.workerz", type="int", low=1, high=2, log=False),
     "spec.parameters[0].path: 'rollouts.workerz' is not a field of rollouts (did you mean 'rollouts.workers'?)"),
    (lambda s: s["parameters"][0].update(path="stop.timesteps"),
     "spec.parameters[0].path: 'stop.timesteps' is not a path a sweep can set: a parameter sets config.NAME"),
    (lambda s: s["parameters"][0].update(path="lr"), "spec.parameters[0].path: 'lr' is not a path a sweep can set"),
    (lambda s: s["parameters"][0].update(path="config.learningStarts", type="int", low=1, high=9, log=False),
     "spec.parameters[0].path: 'config.learningStarts' is not a hyperparameter of ppo (it is one of dqn, "
     "apex-dqn and sac's)"),
    (lambda s: s["parameters"][0].update(path="config.learning_rate"),
     "spec.parameters[0].path: 'config.learning_rate' is not a hyperparameter of ppo"),
    (lambda s: s["parameters"][1].update(path="config.entropy_coeff"),
     "spec.parameters[1].path: 'config.entropy_coeff' is not a hyperparameter of ppo (did you mean "
     "'config.entropyCoeff'?)"),
    (lambda s: s.update(objective={"metric": "episodeReturnMaen"}),
     "spec.objective.metric: 'episodeReturnMaen' is not a result that ppo reports (did you mean "
     "'episodeReturnMean'?)"),
    (lambda s: s.update(objective={"metric": "learner.entropyy"}),
     "spec.objective.metric: 'learner.entropyy' is not a statistic the ppo learner reports (did you mean "
     "'learner.entropy'?)"),
    (lambda s: s.update(objective={"metric": "replay.size"}), "spec.objective.metric: 'replay.size' is not a "
     "result that ppo reports"),
    (lambda s: s["parameters"][0].update(high=5.0), "spec.parameters[0].high: config.lr=5.0 makes an invalid trial: "
     "template.config.lr: must be <= 1.0"),
    (lambda s: s["parameters"][0].update(low=0.01), "spec.parameters[0].high: must be greater than low (0.01)"),
    (lambda s: s["parameters"][0].update(low=0.0), "spec.parameters[0].low: must be > 0 with log: true"),
    (lambda s: s["parameters"][0].pop("high"), "spec.parameters[0].high: required for a float parameter"),
    (lambda s: s["parameters"][1].update(values=["a"]), "spec.parameters[1].values[0]: config.entropyCoeff='a' "
     "makes an invalid trial: template.config.entropyCoeff: must be a number"),
    (lambda s: s["parameters"][1].pop("values"), "spec.parameters[1].values: required for a categorical parameter"),
    (lambda s: s["parameters"][1].update(low=1), "spec.parameters[1].low: only for float and int parameters"),
    (lambda s: s["parameters"].append({"path": "config.lr", "type": "float", "low": 0.1, "high": 0.2}),
     "spec.parameters[2].path: 'config.lr' is already swept by spec.parameters[0]"),
    (lambda s: s["parameters"].append({"path": "config.numEpochs", "type": "int", "low": 1.5, "high": 4}),
     "spec.parameters[2].low: must be a whole number for an int parameter"),
    (lambda s: s["parameters"].append({"path": "config.seed", "type": "int", "low": 1, "high": 4}),
     "spec.parameters[2].path: config.seed is set per run by seedsPerTrial"),
    (lambda s: s.update(search={"algorithm": "grid"}),
     "spec.parameters[0].step: grid search needs a step for a float parameter"),
    (lambda s: s.update(search={"algorithm": "pbt"}), "spec.search.pbt: required with algorithm: pbt"),
    (lambda s: s.update(search={"algorithm": "pbt", "pbt": {"populationSize": 4, "perturbationInterval": 10}}),
     "spec.maxTrials: with pbt the trials are the population"),
    (lambda s: s.update(search={"algorithm": "tpe", "pbt": {"perturbationInterval": 10}}),
     "spec.search.pbt: only with algorithm: pbt, not tpe"),
    (lambda s: s.update(search={"algorithm": "bayes"}), "spec.search.algorithm: must be one of"),
    (lambda s: s.update(maxTrialz=3), "spec.maxTrialz: unknown field (did you mean 'maxTrials'?)"),
    (lambda s: s.update(parallelism=0), "spec.parallelism: must be >= 1"),
    (lambda s: s.update(seedsPerTrial=3), "spec.parallelism: is 2, less than spec.seedsPerTrial (3): a trial "
     "starts the runs of all its seeds at once, each taking a slot of parallelism, so set it to at least 3"),
    (lambda s: s["template"].update(algorithm="PPO"), "spec.template.algorithm: must be one of"),
    (lambda s: s["template"].update(stop={}), "spec.template.stop: set at least one of"),
    (lambda s: s["template"].update(algorithm="a2c"), "spec.template.algorithm: must be one of"),
    (lambda s: s.update(objective={"metric": "evaluationReturnMean"}),
     "spec.objective.metric: 'evaluationReturnMean' is reported only with spec.template.evaluation"),
    (lambda s: s.update(earlyStopping={"algorithm": "median", "interval": 100000}),
     "spec.earlyStopping.interval: is longer than spec.template.stop.timesteps"),
])
def test_mistakes_are_named_by_field(change, expected):
    errors = errors_of(doc_with(change))
    assert any(e.startswith(expected) for e in errors), errors


def test_a_wrongly_cased_template_algorithm_suggests_the_right_one():
    errors = errors_of(doc_with(lambda s: s["template"].update(algorithm="PPO")))
    assert errors[0].startswith("spec.template.algorithm:") and errors[0].endswith("(did you mean 'ppo'?)")


def test_seeds_per_trial_up_to_parallelism_are_accepted():
    assert validate_sweep_document(doc_with(lambda s: s.update(seedsPerTrial=2))).spec.seeds_per_trial == 2


def test_range_and_template_checks_come_with_the_other_errors_in_one_run():
    """A mistake elsewhere in the sweep does not hide the parameters' ranges, the template's own checks or
    parallelism against seedsPerTrial: every mistake in one run."""
    def change(s: dict[str, Any]) -> None:
        s.update(paralellism=2, seedsPerTrial=3, search={"algorithm": "grid"})
        s["template"].pop("stop")
        s["parameters"][0].update(low=0.01, high=0.001)
        s["parameters"].append({"path": "config.numEpochs", "type": "integer", "low": 1, "high": 4})
    errors = errors_of(doc_with(change))
    for expected in ("spec.paralellism: unknown field", "spec.parameters[2].type: must be one of",
                     "spec.template.stop: set at least one of",
                     "spec.parameters[0].high: must be greater than low",
                     "spec.parameters[0].step: grid search needs a step",
                     "spec.parallelism: is 2, less than"):
        assert any(e.startswith(expected) for e in errors), (expected, errors)
    assert not any(e.startswith("spec.parameters[2].") and ".type" not in e for e in errors)


def test_every_example_sweep_is_valid_for_kuberl_and_the_crd():
    # Draft 4: OpenAPI v3's exclusiveMinimum is a boolean beside minimum, as in JSON Schema draft 4.
    schema = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert EXAMPLES
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        validate_sweep_document(copy.deepcopy(doc))
        jsonschema.Draft4Validator(schema).validate(doc)


def test_the_crd_refuses_what_the_types_refuse():
    schema = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    doc = doc_with(lambda s: s.update(parallelism=0))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema).validate(doc)


def test_the_crd_schema_is_structural():
    schema = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk_schema(schema):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "const", "$defs", "title", "default"):
            assert forbidden not in node, f"{path} has {forbidden}"
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"), f"{path} has no type"


def test_the_crd_names_columns_and_status():
    crd = build_sweep_crd()
    assert crd["metadata"]["name"] == "rlsweeps.kuberl.io"
    assert crd["spec"]["names"]["shortNames"] == ["rls"] and "kuberl" in crd["spec"]["names"]["categories"]
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Done"] == ".status.trialsSucceeded" and columns["Running"] == ".status.trialsRunning"
    assert columns["Failed"] == ".status.trialsFailed" and columns["Best"] == ".status.best.value"
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_generated_files_match_the_types():
    assert (ROOT / "crds" / "rlsweep.yaml").read_text() == render_sweep_crd(), "run `make crds`"
    assert (ROOT / "charts" / "kuberl" / "templates" / "crd-rlsweep.yaml").read_text() == render_sweep_chart_crd()
    assert (ROOT / "docs" / "sweep-reference.md").read_text() == render_sweep_reference(), "run `make crds`"


def test_a_pbt_sweeps_manifest_form_validates_again():
    # kuberl sweep writes sweep.to_manifest() as its directory's sweep.yaml: it must read back as the same sweep.
    doc = doc_with(lambda s: (s.pop("maxTrials"),
                              s.update(search={"algorithm": "pbt", "pbt": {"populationSize": 4,
                                                                             "perturbationInterval": 10000}})))
    manifest = validate_sweep_document(doc).to_manifest()
    again = validate_sweep_document(copy.deepcopy(manifest))
    assert again.spec.max_trials == 4
    assert again.to_manifest() == manifest


def test_validate_and_sweep_run_the_templates_env_checks(tmp_path, capsys, monkeypatch):
    """A template whose env cannot be built is named before any trial runs: validated, it used to pass, and
    `kuberl sweep` then failed every trial on it."""
    from kuberl import cli

    path = tmp_path / "sweep.yaml"
    path.write_text(ISSUE_EXAMPLE.replace("CartPole-v1", "CartPol-v1"))
    assert cli.main(["validate", "-f", str(path)]) == 2
    assert "spec.template.env.id: unknown Gymnasium env id 'CartPol-v1'" in capsys.readouterr().err
    assert cli.main(["validate", "-f", str(path), "--skip-env-checks"]) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", "-f", str(path), "--dir", str(tmp_path / "sw")]) == 2
    assert "spec.template.env.id: unknown Gymnasium env id" in capsys.readouterr().err
    assert not (tmp_path / "sw").exists()  # no trial started, no sweep directory
    path.write_text(ISSUE_EXAMPLE)
    assert cli.main(["validate", "-f", str(path)]) == 0
