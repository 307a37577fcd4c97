"""A manifest is read by the CRD's names only: a Python name (envs_per_worker) is refused, naming the manifest's
name, in every layer that reads manifests (validate and train, submit, the operator, sweeps), so that no key the
CRD does not know reaches a cluster, where the API server would prune it unread. The Python API keeps its names.
Every independent mistake is reported in one run."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from kuberl.api.algorithms import HYPERPARAMS
from kuberl.api.field_errors import ManifestError
from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.api.types import RLExperimentSpec, RolloutsSpec
from kuberl.api.validation import validate_document
from kuberl.client.manifests import prepare
from kuberl.operator.reconcile import validate_body
from kuberl.operator.sweep_reconcile import validate_sweep_body
from kuberl_testing.bad_inputs import base_manifest

S3 = {"uri": "s3://bucket/runs"}


def errors_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate_document(doc)
    return [str(e) for e in info.value.errors]


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds, and whether it holds a list of them."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate, False
        if get_origin(candidate) is list:
            item = get_args(candidate)[0]
            if isinstance(item, type) and issubclass(item, BaseModel):
                return item, True
    return None, False


def _renamed_fields(model: type[BaseModel], path: str = "spec") -> Iterator[tuple[str, str, str]]:
    """(the path of a section, a field's Python name there, its manifest name) for every field of the spec whose
    two names differ, nested sections included."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        if alias != name:
            yield path, name, alias
        nested, many = _model_of(field.annotation)
        if nested is not None:
            yield from _renamed_fields(nested, f"{path}.{alias}" + ("[0]" if many else ""))


RENAMED = sorted(set(_renamed_fields(RLExperimentSpec)))
HYPERPARAMETERS = sorted({(algorithm, name, field.alias) for algorithm, params in HYPERPARAMS.items()
                          for name, field in params.model_fields.items() if field.alias and field.alias != name})


def _with_key(path: str, key: str) -> dict[str, Any]:
    doc = base_manifest("names")
    node: Any = doc
    for part in path.split("."):
        name, _, index = part.partition("[")
        node = node.setdefault(name, [{}] if index else {})
        node = node[0] if index else node
    node[key] = 1
    return doc


def test_the_spec_has_renamed_fields_in_every_section():
    sections = {path for path, _, _ in RENAMED}
    assert {"spec", "spec.rollouts", "spec.stop", "spec.checkpoint", "spec.evaluation", "spec.multiAgent",
            "spec.head", "spec.workers"} <= sections, sections
    assert len(HYPERPARAMETERS) > 60


@pytest.mark.parametrize(("path", "name", "alias"), RENAMED, ids=[f"{p}.{n}" for p, n, _ in RENAMED])
def test_a_python_field_name_is_refused_naming_the_manifest_name(path, name, alias):
    assert f"{path}.{name}: unknown field (did you mean {alias!r}?)" in errors_of(_with_key(path, name))


@pytest.mark.parametrize(("algorithm", "name", "alias"), HYPERPARAMETERS, ids=[f"{a}-{n}" for a, n, _ in HYPERPARAMETERS])
def test_a_python_hyperparameter_name_is_refused_naming_the_manifest_name(algorithm, name, alias):
    doc = base_manifest("names", algorithm)
    doc["spec"]["config"] = {name: 1}
    assert f"spec.config.{name}: unknown field (did you mean {alias!r}?)" in errors_of(doc)


def test_a_policys_config_is_read_by_manifest_names_too():
    doc = base_manifest("names")
    doc["spec"]["env"] = {"id": "mpe2:simple_speaker_listener_v4"}
    doc["spec"]["multiAgent"] = {"policies": [{"name": "all", "agents": ["*"], "config": {"entropy_coeff": 0.1}}]}
    assert errors_of(doc) == ["spec.multiAgent.policies[0].config.entropy_coeff: unknown field "
                              "(did you mean 'entropyCoeff'?)"]


def test_submit_refuses_a_key_the_crd_would_prune():
    doc = base_manifest("names")
    doc["spec"].update(rollouts={"envs_per_worker": 4}, storage=S3)
    with pytest.raises(ManifestError) as info:
        prepare(doc, namespace="default", namespace_given=False)
    assert [str(e) for e in info.value.errors] == [
        "spec.rollouts.envs_per_worker: unknown field (did you mean 'envsPerWorker'?)"]


def test_the_operator_refuses_a_python_name_in_the_open_config_map():
    # spec.config keeps unknown keys in the API server (preserve-unknown-fields): the operator must read it
    # as kuberl validate does, not train with the default in its place.
    body = base_manifest("names")
    body["spec"].update(config={"entropy_coeff": 0.01}, storage=S3)
    experiment, errors = validate_body(body)
    assert experiment is None
    assert errors == ("spec.config.entropy_coeff: unknown field (did you mean 'entropyCoeff'?)",)


def sweep_doc(**spec: Any) -> dict[str, Any]:
    template = base_manifest("t")["spec"]
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": "names"},
            "spec": {"template": {**template, "storage": S3},
                     "parameters": [{"path": "config.lr", "type": "float", "low": 1e-4, "high": 1e-2}], **spec}}


def test_the_operator_refuses_python_names_in_a_sweep():
    doc = sweep_doc(max_trials=3)
    doc["spec"]["template"]["config"] = {"entropy_coeff": 0.01}
    sweep, errors = validate_sweep_body(doc)
    assert sweep is None
    assert errors == ["spec.max_trials: unknown field (did you mean 'maxTrials'?)",
                      "spec.template.config.entropy_coeff: unknown field (did you mean 'entropyCoeff'?)"]


def test_the_operator_refuses_a_sweep_whose_objective_no_trial_reports():
    sweep, errors = validate_sweep_body(sweep_doc(objective={"metric": "episodeReturnMaen"}))
    assert sweep is None
    assert errors == ["spec.objective.metric: 'episodeReturnMaen' is not a result that ppo reports (did you mean "
                      "'episodeReturnMean'?)"]


def test_the_python_api_keeps_python_names():
    from kuberl.trainer.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("CartPole-v1").rollouts(workers=0, envs_per_worker=4)
              .training(entropy_coeff=0.02, num_epochs=2).stopping(timesteps=1000))
    assert config.experiment.spec.rollouts.envs_per_worker == 4
    assert config.params.entropy_coeff == 0.02 and config.params.num_epochs == 2
    assert RolloutsSpec(envs_per_worker=4).to_manifest()["envsPerWorker"] == 4


# -- every mistake in one run -------------------------------------------------------------------------------------

def test_mistakes_in_three_sections_are_reported_together():
    doc = base_manifest("three")
    doc["spec"].update(rolouts={"workers": 0}, stop={"timestep": 1000}, config={"lrr": 0.001})
    assert sorted(errors_of(doc)) == [
        "spec.config.lrr: unknown field (did you mean 'lr'?)",
        "spec.rolouts: unknown field (did you mean 'rollouts'?)",
        "spec.stop.timestep: unknown field (did you mean 'timesteps'?)",
    ]


def test_the_hyperparameters_are_not_checked_twice_or_against_an_unknown_algorithm():
    doc = base_manifest("twice")
    doc["spec"].update(algorithm="a3c", config={"lrr": 1})
    assert [e for e in errors_of(doc) if "config" in e] == []
    doc = base_manifest("twice")
    doc["spec"].update(config="lr=1", rolouts={})
    assert sorted(errors_of(doc)) == ["spec.config: must be a mapping, got 'lr=1'",
                                      "spec.rolouts: unknown field (did you mean 'rollouts'?)"]


def test_a_document_of_another_kind_gets_no_spec_errors():
    doc = base_manifest("pod")
    doc.update(kind="Pod")
    doc["spec"]["config"] = {"lrr": 1}
    assert errors_of(doc) == ["kind: must be 'RLExperiment', got 'Pod'"]


def test_a_sweep_reports_its_template_parameters_and_objective_together():
    doc = sweep_doc(objective={"metric": "episodeReturnMaen"}, maxTrialz=3)
    doc["spec"]["template"].update(rolouts={}, config={"lrr": 1})
    doc["spec"]["parameters"].append({"path": "lr", "type": "float", "low": 0.1, "high": 0.2})
    with pytest.raises(ManifestError) as info:
        validate_sweep_document(doc)
    assert sorted(str(e) for e in info.value.errors) == [
        "spec.maxTrialz: unknown field (did you mean 'maxTrials'?)",
        "spec.objective.metric: 'episodeReturnMaen' is not a result that ppo reports (did you mean "
        "'episodeReturnMean'?)",
        "spec.parameters[1].path: 'lr' is not a path a sweep can set: a parameter sets config.NAME (a "
        "hyperparameter), rollouts.NAME or env.config.NAME, in the manifest's camelCase (did you mean 'config.lr'?)",
        "spec.template.config.lrr: unknown field (did you mean 'lr'?)",
        "spec.template.rolouts: unknown field (did you mean 'rollouts'?)",
    ]


def test_a_valid_sweep_with_an_invalid_template_still_checks_its_parameters():
    doc = sweep_doc()
    doc["spec"]["template"]["stop"] = {}
    doc["spec"]["parameters"].append({"path": "rollouts.workerz", "type": "int", "low": 1, "high": 2})
    with pytest.raises(ManifestError) as info:
        validate_sweep_document(doc)
    assert [str(e) for e in info.value.errors] == [
        "spec.template.stop: set at least one of timesteps, episodeReturnMean, timeSeconds, iterations, "
        "evaluationReturnMean",
        "spec.parameters[1].path: 'rollouts.workerz' is not a field of rollouts (did you mean 'rollouts.workers'?)",
    ]


# -- the objective ----------------------------------------------------------------------------------------------

def _metric_errors(metric: str, algorithm: str = "ppo", **template: Any) -> list[str]:
    doc = sweep_doc(objective={"metric": metric})
    doc["spec"]["template"].update(algorithm=algorithm, **template)
    if algorithm == "sac":
        doc["spec"]["template"]["env"] = {"id": "Pendulum-v1"}
    try:
        validate_sweep_document(doc)
    except ManifestError as exc:
        return [str(e) for e in exc.errors]
    return []


EVALUATION = {"evaluation": {"interval": 2}}
MULTI_AGENT = {"env": {"id": "mpe2:simple_speaker_listener_v4"}}


@pytest.mark.parametrize(("metric", "algorithm", "template"), [
    ("episodeReturnMean", "ppo", {}), ("timesteps", "dqn", {}), ("learner.entropy", "ppo", {}),
    ("learner.meanQ", "dqn", {}), ("replay.shard_0.size", "dqn", {}), ("learner.alphaLoss", "sac", {}),
    ("learner.policyLagMean", "appo", {}), ("sampler.envStepsPerSecond", "impala", {}),
    ("evaluationReturnMean", "ppo", EVALUATION), ("evaluation.returnStd", "ppo", EVALUATION),
    ("policies.speaker.learner.entropy", "ppo", MULTI_AGENT), ("agentSteps", "ppo", MULTI_AGENT),
    ("anything.a.callback.adds", "ppo", {"callbacks": "my_pkg.hooks:Hooks"}),
])
def test_a_metric_the_run_reports_is_taken(metric, algorithm, template):
    assert _metric_errors(metric, algorithm, **template) == []


@pytest.mark.parametrize(("metric", "algorithm", "template", "expected"), [
    ("episodeReturnMaen", "ppo", {}, "'episodeReturnMaen' is not a result that ppo reports (did you mean "
     "'episodeReturnMean'?)"),
    ("learner.meanQ", "ppo", {}, "'learner.meanQ' is not a statistic the ppo learner reports (it reports "
     "learner.policyLoss, learner.valueLoss, learner.entropy, "),
    ("learner.entropyy", "ppo", {}, "'learner.entropyy' is not a statistic the ppo learner reports (did you mean "
     "'learner.entropy'?)"),
    ("learner.entropy", "dqn", {}, "'learner.entropy' is not a statistic the dqn learner reports (it reports "
     "learner.updates, "),
    ("replay.shard_0.size", "ppo", {}, "'replay.shard_0.size' is not a result that ppo reports (it reports "
     "iteration, timesteps, "),
    ("evaluation.returnMean", "ppo", {}, "'evaluation.returnMean' is reported only with spec.template.evaluation"),
    ("evaluation.retrunMean", "ppo", EVALUATION, "'evaluation.retrunMean' is not a figure of an evaluation (did you "
     "mean 'evaluation.returnMean'?)"),
    ("policies.speaker.learner.entropy", "ppo", {}, "'policies.speaker.learner.entropy' is not a result that ppo "
     "reports"),
])
def test_a_metric_the_run_never_reports_is_refused_before_any_trial(metric, algorithm, template, expected):
    errors = _metric_errors(metric, algorithm, **template)
    assert len(errors) == 1 and errors[0].startswith(f"spec.objective.metric: {expected}"), errors


# -- what submit asks of the API server ---------------------------------------------------------------------------

class _Recorder(http.server.BaseHTTPRequestHandler):
    paths: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        _Recorder.paths.append(self.path)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        reply = json.dumps(json.loads(body)).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


def test_submit_asks_the_api_server_for_strict_field_validation():
    from kubernetes.client import ApiClient, Configuration

    from kuberl.client.connection import Connection
    from kuberl.client.experiments import Client

    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        configuration = Configuration(host=f"http://127.0.0.1:{server.server_port}")
        connection = Connection(api=ApiClient(configuration), namespace="default", namespace_given=False,
                                context=None, server=configuration.host)
        doc = base_manifest("strict")
        doc["spec"]["storage"] = S3
        Client(connection=connection).submit(doc)
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert _Recorder.paths == ["/apis/kuberl.io/v1alpha1/namespaces/default/rlexperiments?fieldValidation=Strict"]
