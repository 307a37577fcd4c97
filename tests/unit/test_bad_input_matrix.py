"""The bad-input matrix (kuberl_testing.bad_inputs.CASES) against each layer that must refuse it.

(a) The CRD's openAPIV3Schema as the API server applies it: JSON only (no inf/nan), int64 integers,
    metadata.name a DNS subdomain, unknown fields refused (kubectl's default strict field validation),
    x-kubernetes-int-or-string as integer-or-string. Cases the schema cannot express must pass it.
(b) `kuberl validate --cluster` in-process: exit 2, `error: <field>` on stderr, no traceback.
(c) The operator's own validation (the pure part of a reconcile): refuses every case but the env
    checks, which only the trainer can run.
A field of the spec (or a hyperparameter) without a case fails `test_every_field_has_a_case`.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kuberl import cli
from kuberl.api.algorithms import HYPERPARAMS
from kuberl.api.crd import build_crd
from kuberl.api.field_errors import ManifestError
from kuberl.api.types import DNS_SUBDOMAIN_PATTERN
from kuberl.api.validation import INT64_RANGE, load_manifest
from kuberl.api.yaml_text import parse_yaml
from kuberl.operator.reconcile import validate_body
from kuberl_testing.bad_inputs import (
    CASES,
    CLASSES,
    CLUSTER,
    DELETE,
    ENV,
    MANIFEST,
    UNKNOWN_FIELD,
    BadInput,
    base_manifest,
)
from kuberl_testing.schemas import as_json_schema

IDS = [c.id for c in CASES]


def _crd_schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


VALIDATOR = jsonschema.Draft7Validator(as_json_schema(_crd_schema()))


# Maps the schema leaves open (x-kubernetes-preserve-unknown-fields): the API server stores any JSON
# number there, a float when it does not fit in int64 (shown on kube-apiserver 1.20).
OPEN_MAPS = ("spec.config", "spec.env.config")


def _big_integers(node: Any, path: str = "") -> list[str]:
    if path in OPEN_MAPS:
        return []
    if isinstance(node, dict):
        return [e for k, v in node.items() for e in _big_integers(v, f"{path}.{k}" if path else k)]
    if isinstance(node, list):
        return [e for i, v in enumerate(node) for e in _big_integers(v, f"{path}[{i}]")]
    if isinstance(node, int) and not isinstance(node, bool) and not INT64_RANGE[0] <= node <= INT64_RANGE[1]:
        return [f"{path}: does not fit in int64 (decoded as a float)"]
    return []


def api_server_errors(doc: dict[str, Any]) -> list[str]:
    """What the API server would say to `kubectl apply` of this object ([] when it stores it)."""
    try:
        json.dumps(doc, allow_nan=False)
    except ValueError as exc:
        return [f"not representable as JSON: {exc}"]
    errors = _big_integers(doc)
    name = (doc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not re.match(DNS_SUBDOMAIN_PATTERN, name) or len(name) > 253:
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    for error in VALIDATOR.iter_errors(doc):
        where = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)
        errors.append(f"{where.replace('.[', '[')}: {error.message[:200]}")
    return errors


def _names(errors: list[str], case: BadInput) -> bool:
    """Some error is at the case's field, or at its parent and mentions the field's name."""
    field = case.field_path
    leaf = field.rsplit(".", 1)[-1].split("[")[0]
    for error in errors:
        where, _, message = error.partition(": ")
        if where == field or where.startswith(field + "[") or where.startswith(field + "."):
            return True
        if field.startswith(where) and (leaf in message or leaf in where):
            return True
    return False


# -- the table covers the spec ------------------------------------------------------------------------------


def _leaves(node: dict[str, Any], path: str = "") -> list[str]:
    if path.endswith(".template"):  # cut from the Kubernetes schema: one field here, its refusals in _TEMPLATE
        return [path]
    if "properties" in node:
        return [leaf for k, v in node["properties"].items() for leaf in _leaves(v, f"{path}.{k}" if path else k)]
    if node.get("type") == "array" and "properties" in node.get("items", {}):
        return _leaves(node["items"], f"{path}[]")
    return [path]


def spec_fields() -> set[str]:
    """Every leaf of the CRD's spec schema, and every hyperparameter any algorithm takes in spec.config."""
    fields = set(_leaves(_crd_schema()["properties"]["spec"]))
    for params in HYPERPARAMS.values():
        fields |= {f"config.{f.alias or n}" for n, f in params.model_fields.items()}
    return fields | {"metadata.name"}


def test_every_field_has_a_case():
    covered = {c.leaf for c in CASES if c.kind != UNKNOWN_FIELD}
    missing = sorted(spec_fields() - covered)
    assert not missing, f"fields with no bad-input case in kuberl_testing.bad_inputs.CASES: {missing}"
    assert len(spec_fields()) > 80  # the derivation found the spec and the hyperparameters


def test_every_class_has_cases_and_ids_are_unique():
    assert {c.kind for c in CASES} == set(CLASSES)
    assert len(set(IDS)) == len(IDS), sorted(i for i in IDS if IDS.count(i) > 1)


def test_the_base_manifest_passes_every_layer(capsys, tmp_path):
    for algorithm in HYPERPARAMS:
        doc = base_manifest(algorithm=algorithm)
        assert api_server_errors(doc) == []
        assert validate_body({**doc, "metadata": {"name": "bad-input", "namespace": "ns"}})[1] == ()
        path = tmp_path / f"{algorithm}.yaml"
        path.write_text(yaml.safe_dump(doc))
        assert cli.main(["validate", "-f", str(path), "--cluster"]) == 0, capsys.readouterr().err


# -- (a) the CRD schema --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_crd_schema_refuses_what_it_can_express(case: BadInput):
    errors = api_server_errors(case.manifest())
    if case.schema:
        assert errors, f"the API server would store {case.id}"
        assert _names(errors, case) or errors[0].startswith("not representable"), errors
    else:
        assert errors == [], f"{case.id} is marked for code to catch, but the schema refuses it: {errors}"


# -- (b) kuberl validate -------------------------------------------------------------------------------------


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: BadInput, *flags: str) -> tuple[int, str]:
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(case.manifest(), allow_unicode=True, width=1 << 30))
    code = cli.main(["validate", "-f", str(path), *flags])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kuberl_validate_exits_2_naming_the_field(case: BadInput, tmp_path, capsys):
    started = time.perf_counter()
    code, err = _validate(tmp_path, capsys, case, "--cluster")
    assert code == 2, err
    assert "Traceback" not in err
    assert f"error: {case.field_path}" in err, err[:2000]
    assert len(err) < 20_000, "an error message must not echo a huge value back"
    assert time.perf_counter() - started < 60  # a hang guard only: a loaded machine must not fail it


@pytest.mark.parametrize("case", [c for c in CASES if c.catcher == CLUSTER], ids=lambda c: c.id)
def test_cluster_only_cases_are_fine_for_a_local_run(case: BadInput, tmp_path, capsys):
    code, err = _validate(tmp_path, capsys, case)
    assert code == 0, err


# -- (c) the operator's validation ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_operator_refuses_all_but_env_cases(case: BadInput):
    doc = case.manifest()
    doc["metadata"] = {**doc["metadata"], "namespace": "research"}
    experiment, errors = validate_body(doc)
    if case.catcher == ENV:
        assert experiment is not None and errors == ()  # the operator imports no env; the trainer pod checks
        return
    assert case.catcher in (MANIFEST, CLUSTER)
    assert experiment is None
    assert any(e.startswith(case.field_path) for e in errors), errors
    assert sum(len(e) for e in errors) < 20_000


# -- hostile YAML --------------------------------------------------------------------------------------------


def test_billion_laughs_is_refused_quickly_by_kuberl_validate(tmp_path, capsys):
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level, prev in zip("bcdefghi", "abcdefgh", strict=True):
        lines.append(f"{level}: &{level} [{', '.join([f'*{prev}'] * 9)}]")
    doc = yaml.safe_dump(base_manifest()) + "\n".join(lines).replace("a:", "x-a:", 1) + "\n"
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(doc)
    started = time.perf_counter()
    assert cli.main(["validate", "-f", str(bomb)]) == 2
    assert time.perf_counter() - started < 30  # expanding the 9^9 nodes would run far past this (a hang guard)
    err = capsys.readouterr().err
    assert "YAML nodes" in err and "Traceback" not in err


def test_deeply_nested_yaml_is_an_error_not_a_crash():
    text = yaml.safe_dump(base_manifest()).replace("env:\n", "env:\n  config: " + "[" * 5000 + "]" * 5000 + "\n", 1)
    with pytest.raises(ManifestError, match="nested too deeply"):
        parse_yaml(text)


def test_a_manifest_over_1_mb_is_refused_before_parsing():
    doc = base_manifest()
    doc["spec"]["image"] = "x" * 1_000_001
    with pytest.raises(ManifestError, match="larger than 1000000 bytes"):
        load_manifest(yaml.safe_dump(doc, width=1 << 30))


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1.0e+400"])
def test_yaml_infinities_never_reach_the_trainer(value):
    text = yaml.safe_dump(base_manifest()).replace("timesteps: 1000", f"episodeReturnMean: {value}")
    with pytest.raises(ManifestError) as info:
        load_manifest(text)
    assert [str(e) for e in info.value.errors] == ["spec.stop.episodeReturnMean: must be a finite number"]


def test_deleting_a_field_is_reflected_in_the_manifest():
    case = next(c for c in CASES if c.value is DELETE and c.path == "algorithm")
    assert "algorithm" not in case.manifest()["spec"]
