"""The CRD is generated from the API types; these tests catch drift and non-structural schemas."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from kuberl.api.crd import build_crd, render_chart_crd, render_crd
from kuberl.api.reference import render_reference
from kuberl.api.validation import load_manifest
from kuberl_testing.schemas import walk_schema

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "rlexperiment.yaml"
CHART_CRD = ROOT / "charts" / "kuberl" / "templates" / "crd.yaml"


def test_committed_crd_matches_the_api_types():
    assert CRD_FILE.read_text() == render_crd(), "crds/ drifted from the API types: run `make crds`"


def test_manifest_reference_matches_the_api_types():
    assert (ROOT / "docs" / "manifest.md").read_text() == render_reference(), "run `make crds`"


def test_chart_crd_matches_the_api_types():
    assert CHART_CRD.exists(), "the chart must ship the CRD (charts/kuberl/templates/crd.yaml)"
    assert CHART_CRD.read_text() == render_chart_crd(), "the chart's CRD drifted: run `make crds`"
    body = CHART_CRD.read_text().split("\n", 2)[2].rsplit("{{- end }}", 1)[0]
    chart_crd = yaml.safe_load(body)
    assert chart_crd["spec"] == build_crd()["spec"]
    assert chart_crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert chart_crd["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == "Delete=false"


def _schema():
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_is_structural():
    for path, node in walk_schema(_schema()):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "const", "$defs", "title", "default"):
            assert forbidden not in node, f"{path} has {forbidden}"
        has_type = "type" in node or node.get("x-kubernetes-int-or-string") is True or node.get(
            "x-kubernetes-preserve-unknown-fields") is True  # an untyped node: a scalar of any type (learner.bf16)
        assert has_type, f"{path} has no type"


def test_schema_carries_the_constraints():
    spec = _schema()["properties"]["spec"]
    assert spec["required"] == ["algorithm", "env"]
    assert spec["properties"]["algorithm"]["enum"] == ["ppo", "dqn", "apex-dqn", "impala", "appo", "sac"]
    assert spec["properties"]["rollouts"]["properties"]["workers"]["minimum"] == 0
    assert spec["properties"]["learner"]["properties"]["gpus"]["type"] == "integer"
    assert "pattern" in spec["properties"]["head"]["properties"]["memory"]
    assert spec["properties"]["storage"]["properties"]["uri"]["pattern"].startswith("^(s3://")
    assert spec["properties"]["config"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["properties"]["env"]["properties"]["config"]["x-kubernetes-preserve-unknown-fields"] is True
    status = _schema()["properties"]["status"]
    assert status["properties"]["phase"]["enum"] == [
        "Pending", "Queued", "Starting", "Running", "Succeeded", "Failed", "Suspended"
    ]


def test_subresources_columns_and_names():
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    assert crd["metadata"]["name"] == "rlexperiments.kuberl.io"
    assert crd["spec"]["names"]["shortNames"] == ["rlx"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.workers.replicas"
    assert "status" in version["subresources"]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    for column in ("Phase", "Algorithm", "Env", "Iteration", "Timesteps", "Return", "Age"):
        assert column in names


def _crd_validate(doc: dict) -> None:
    schema = dict(_schema())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft7Validator)


EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_pass_both_the_crd_schema_and_the_validator(example: Path):
    doc = yaml.safe_load(example.read_text())
    _crd_validate(doc)
    load_manifest(example.read_text())


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"algorithm": "a3c"}, "'a3c' is not one of"),
        ({"rollouts": {"workers": -1}}, "-1 is less than the minimum of 0"),
        ({"learner": {"gpus": 0.5}}, "0.5 is not of type 'integer'"),
        ({"head": {"memory": "lots"}}, "'lots' does not match"),
    ],
)
def test_the_crd_schema_refuses_what_the_validator_refuses(patch, message):
    doc = yaml.safe_load((ROOT / "examples" / "cartpole-ppo.yaml").read_text())
    doc["spec"].update(patch)
    with pytest.raises(jsonschema.ValidationError, match=message):
        _crd_validate(doc)


def test_the_status_keeps_the_evaluation_return_and_a_column_shows_it():
    version = build_crd()["spec"]["versions"][0]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["evaluationReturnMean"]["type"] == "number"  # not pruned by the API server
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Eval"]["jsonPath"] == ".status.evaluationReturnMean" and columns["Eval"]["type"] == "number"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["evaluation"]["required"] == ["interval"]
    assert spec["callbacks"]["pattern"].startswith("^[A-Za-z_]")
