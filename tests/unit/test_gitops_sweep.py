"""The RLSweep health checks for Argo CD (Lua) and Flux (CEL) give the right status for every fixture,
in real interpreters (as tests/unit/test_gitops.py does for RLExperiment), and follow the operator's
own sweep statuses."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from lupa import lua51

from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.operator.sweep_decision import RunObservation, decide_sweep

ROOT = Path(__file__).resolve().parents[2]
ARGO_DIR = ROOT / "gitops" / "argocd" / "resource_customizations" / "kuberl.io" / "RLSweep"
HEALTH_LUA = (ARGO_DIR / "health.lua").read_text()
ARGO_TESTS = yaml.safe_load((ARGO_DIR / "health_test.yaml").read_text())["tests"]
FLUX_SPEC = yaml.safe_load((ROOT / "gitops" / "flux" / "rlsweep_health_test.yaml").read_text())
(FLUX_CHECK,) = yaml.safe_load((ROOT / "gitops" / "flux" / "rlsweep-health.yaml").read_text())["healthCheckExprs"]


def argo_health(obj: dict[str, Any]) -> dict[str, str]:
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(HEALTH_LUA)
    return {"status": result["status"], "message": result["message"]}


def flux_status(obj: dict[str, Any]) -> str:
    activation = {key: celpy.json_to_cel(value) for key, value in obj.items()}
    env = celpy.Environment()
    for field, verdict in (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current")):
        result = env.program(env.compile(FLUX_CHECK[field])).evaluate(activation)
        if isinstance(result, celpy.CELEvalError):
            return "InProgress"
        if bool(result):
            return verdict
    return "InProgress"


def fixture(name: str) -> dict[str, Any]:
    return yaml.safe_load((ARGO_DIR / "testdata" / name).read_text())


@pytest.mark.parametrize("case", ARGO_TESTS, ids=[c["inputPath"] for c in ARGO_TESTS])
def test_argocd_health_matches_its_fixture(case):
    assert argo_health(fixture(Path(case["inputPath"]).name)) == case["healthStatus"]


@pytest.mark.parametrize("case", FLUX_SPEC["tests"], ids=[c["inputPath"] for c in FLUX_SPEC["tests"]])
def test_flux_health_matches_its_fixture(case):
    assert flux_status(fixture(case["inputPath"])) == case["status"]


def test_every_fixture_is_valid_and_covered_by_both_tools():
    names = {p.name for p in (ARGO_DIR / "testdata").glob("*.yaml")}
    assert names == {Path(c["inputPath"]).name for c in ARGO_TESTS} == {c["inputPath"] for c in FLUX_SPEC["tests"]}
    for name in names:
        doc = fixture(name)
        validate_sweep_document({k: doc[k] for k in ("apiVersion", "kind", "metadata", "spec")}, strict=False)


def test_the_argocd_cm_carries_the_script_verbatim():
    cm = yaml.safe_load((ROOT / "gitops" / "argocd" / "argocd-cm.yaml").read_text())
    assert cm["data"]["resource.customizations.health.kuberl.io_RLSweep"] == HEALTH_LUA


def test_health_follows_the_statuses_the_operator_writes():
    doc = fixture("new.yaml")
    sweep = validate_sweep_document({k: doc[k] for k in ("apiVersion", "kind", "metadata", "spec")}, strict=False)
    started = decide_sweep(sweep, None, {}, 1, "2026-01-01T00:00:00Z").status
    obj = {**copy.deepcopy(doc), "status": started.model_dump(by_alias=True, exclude_none=True, mode="json")}
    assert argo_health(obj)["status"] == "Progressing" and flux_status(obj) == "InProgress"
    runs = {t.name: RunObservation(phase="Succeeded", value=1.0) for t in started.trials}
    status = started
    for _ in range(10):
        status = decide_sweep(sweep, status, runs, 1, "2026-01-01T00:00:00Z").status
        runs = {t.name: RunObservation(phase="Succeeded", value=1.0) for t in status.trials}
    obj["status"] = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert obj["status"]["phase"] == "Succeeded"
    assert argo_health(obj)["status"] == "Healthy" and flux_status(obj) == "Current"
