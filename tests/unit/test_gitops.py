"""The Argo CD (Lua) and Flux (CEL) health checks give the right status for every fixture.

Both run in real interpreters: Lua 5.1 (Argo CD's gopher-lua speaks 5.1) through lupa, and CEL
through cel-python, fed the same RLExperiment objects.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from lupa import lua51

from kuberl.api.types import Phase
from kuberl.operator.status import ConditionType, Observation, PodState, decide, status_of
from kuberl.operator.status.conditions import PHASE_CONDITIONS

ROOT = Path(__file__).resolve().parents[2]
ARGO_DIR = ROOT / "gitops" / "argocd" / "resource_customizations" / "kuberl.io" / "RLExperiment"
FLUX_DIR = ROOT / "gitops" / "flux"
HEALTH_LUA = (ARGO_DIR / "health.lua").read_text()
ARGO_TESTS = yaml.safe_load((ARGO_DIR / "health_test.yaml").read_text())["tests"]
FLUX_SPEC = yaml.safe_load((FLUX_DIR / "health_test.yaml").read_text())
FLUX_TESTS = FLUX_SPEC["tests"]
FLUX_FIXTURES = (FLUX_DIR / FLUX_SPEC["fixtures"]).resolve()
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


def argo_health(obj: dict[str, Any]) -> dict[str, str]:
    """Run health.lua the way Argo CD does: `obj` is a global table, the chunk returns `hs`."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(HEALTH_LUA)
    return {"status": result["status"], "message": result["message"]}


def _flux_program(expr: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(expr))


def flux_status(obj: dict[str, Any], check: dict[str, str]) -> str:
    """kustomize-controller's order: inProgress, failed, current; an error or no match waits (InProgress)."""
    activation = {key: celpy.json_to_cel(value) for key, value in obj.items()}
    for field, verdict in (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current")):
        if field not in check:
            continue
        result = _flux_program(check[field]).evaluate(activation)
        if isinstance(result, celpy.CELEvalError):
            return "InProgress"
        if bool(result):
            return verdict
    return "InProgress"


def _flux_check() -> dict[str, str]:
    doc = yaml.safe_load((FLUX_DIR / "rlexperiment-health.yaml").read_text())
    (check,) = [c for c in doc["healthCheckExprs"] if c["kind"] == "RLExperiment"]
    assert check["apiVersion"] == "kuberl.io/v1alpha1"
    return check


@pytest.mark.parametrize("case", ARGO_TESTS, ids=[Path(c["inputPath"]).stem for c in ARGO_TESTS])
def test_argocd_health_check_matches_its_fixture(case):
    obj = yaml.safe_load((ARGO_DIR / case["inputPath"]).read_text())
    assert case["healthStatus"]["status"] in ARGO_STATUSES
    assert argo_health(obj) == case["healthStatus"]


@pytest.mark.parametrize("case", FLUX_TESTS, ids=[Path(c["inputPath"]).stem for c in FLUX_TESTS])
def test_flux_health_check_matches_its_fixture(case):
    obj = yaml.safe_load((FLUX_FIXTURES / case["inputPath"]).read_text())
    assert flux_status(obj, _flux_check()) == case["status"]


def test_every_fixture_is_covered_by_both_tools():
    fixtures = {p.name for p in (ARGO_DIR / "testdata").glob("*.yaml")}
    assert {Path(c["inputPath"]).name for c in ARGO_TESTS} == fixtures
    assert {c["inputPath"] for c in FLUX_TESTS} == fixtures
    statuses = {c["healthStatus"]["status"] for c in ARGO_TESTS}
    assert statuses == {"Healthy", "Progressing", "Degraded", "Suspended"}


def test_the_tools_agree_where_their_vocabularies_overlap():
    argo_to_flux = {"Healthy": "Current", "Degraded": "Failed", "Progressing": "InProgress"}
    flux = {c["inputPath"]: c["status"] for c in FLUX_TESTS}
    for case in ARGO_TESTS:
        argo = case["healthStatus"]["status"]
        if argo in argo_to_flux:
            assert flux[Path(case["inputPath"]).name] == argo_to_flux[argo], case["inputPath"]


@pytest.mark.parametrize(
    ("mutate", "status"),
    [
        (lambda o: o["status"].update(observedGeneration=1), "Progressing"),
        (lambda o: o["status"]["conditions"][3].update(status="True", message="Out of memory"), "Degraded"),
        (lambda o: o["spec"].update(suspend=True), "Suspended"),
        (lambda o: o["status"]["conditions"][0].update(status="False"), "Progressing"),
    ],
    ids=["observed-generation-lags", "stalled", "suspend", "not-ready"],
)
def test_argocd_health_follows_changes_to_a_running_experiment(mutate, status):
    obj = yaml.safe_load((ARGO_DIR / "testdata" / "running.yaml").read_text())
    assert argo_health(obj)["status"] == "Healthy"
    mutate(obj)
    assert argo_health(obj)["status"] == status


def test_argocd_cm_snippet_carries_the_tested_script_verbatim():
    cm = yaml.safe_load((ROOT / "gitops" / "argocd" / "argocd-cm.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    assert cm["data"]["resource.customizations.health.kuberl.io_RLExperiment"] == HEALTH_LUA
    assert "ignoreResourceStatusField: all" in cm["data"]["resource.compareoptions"]


def _doc_objects() -> list[dict[str, Any]]:
    text = (ROOT / "docs" / "gitops.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    return [d for b in blocks for d in yaml.safe_load_all(b) if d]


def test_flux_expressions_compile_and_the_doc_shows_them_verbatim():
    check = _flux_check()
    for field in ("inProgress", "failed", "current"):
        _flux_program(check[field])
    (kustomization,) = [d for d in _doc_objects() if d["kind"] == "Kustomization"]
    assert kustomization["spec"]["healthCheckExprs"] == [check]
    assert kustomization["spec"]["wait"] is True


def test_doc_argocd_applications_use_server_side_apply_and_order_the_crd_first():
    apps = {d["metadata"]["name"]: d for d in _doc_objects() if d["kind"] == "Application"}
    chart, experiments = apps["kuberl"], apps["research-experiments"]
    assert chart["spec"]["source"]["path"] == "charts/kuberl"
    for app in (chart, experiments):
        assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
    waves = [int(a["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for a in (chart, experiments)]
    assert waves[0] < waves[1]
    assert "SkipDryRunOnMissingResource=true" in experiments["spec"]["syncPolicy"]["syncOptions"]


# --- the statuses the operator really writes ---------------------------------------------------------

NOW = datetime.datetime(2026, 11, 22, 1, 0, tzinfo=datetime.UTC)


def _head(phase: str, **kwargs: Any) -> PodState:
    return PodState(name="exp-head", role="head", attempt=1, phase=phase, **kwargs)


def _worker(index: int) -> PodState:
    return PodState(name=f"exp-worker-{index}", role="worker", attempt=1, phase="Running", index=index)


def _obs(generation: int, previous: dict[str, Any], **kwargs: Any) -> Observation:
    return Observation(generation, NOW, status_of(previous), **kwargs)


TRAINING = {"phase": "Running", "attempt": 1, "iteration": 5, "timesteps": 5120}
STARTING = {"phase": "Starting", "attempt": 1}
OPERATOR_CASES = {
    # name: (observation, Argo CD, Flux)
    "new": (_obs(1, {}), "Progressing", "InProgress"),
    "head-pending": (_obs(1, STARTING, pods=(_head("Pending"),)), "Progressing", "InProgress"),
    "waiting-for-trainer": (_obs(1, STARTING, pods=(_head("Running"),)), "Progressing", "InProgress"),
    "training": (_obs(1, STARTING, replicas=1, pods=(_head("Running"), _worker(0)), trainer=TRAINING),
                 "Healthy", "Current"),
    "waiting-for-workers": (_obs(1, STARTING, replicas=2, pods=(_head("Running"),), trainer=TRAINING),
                            "Progressing", "InProgress"),
    "succeeded": (_obs(1, {"phase": "Running", "attempt": 1},
                       pods=(_head("Succeeded", exit_code=0, termination={"result": "Succeeded"}),)),
                  "Healthy", "Current"),
    "invalid-spec": (_obs(1, {}, spec_errors=("spec.env.id: unknown env",)), "Degraded", "Failed"),
    "missing-secret": (_obs(1, {}, missing_secret="secret s3-credentials not found"),
                       "Degraded", "Failed"),
    "image-pull": (_obs(1, STARTING, pods=(_head("Pending", waiting_reason="ImagePullBackOff"),)),
                   "Degraded", "Failed"),
    "backoff-exceeded": (_obs(1, {"phase": "Running", "attempt": 4}, backoff_limit=3, restarts=3,
                              failed_attempt=3, pods=(PodState("exp-head", "head", 4, "Failed", exit_code=1),)),
                         "Degraded", "Failed"),
    "refused-change": (_obs(2, {"phase": "Running", "attempt": 1}, pods=(_head("Running"),),
                            trainer=TRAINING, refused_changes=("spec.env.id",)), "Degraded", "Failed"),
    "suspended": (_obs(3, {"phase": "Running", "attempt": 1}, suspend=True, pods=(_head("Running"),)),
                  "Suspended", "Current"),
}


def _experiment(obs: Observation, generation: int | None = None) -> dict[str, Any]:
    status = decide(obs).status
    return {
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
        "metadata": {"name": "exp", "namespace": "research", "generation": generation or obs.generation},
        "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "suspend": obs.suspend},
        "status": status.to_manifest(),
    }


@pytest.mark.parametrize("name", OPERATOR_CASES)
def test_health_of_the_status_the_operator_decides(name):
    obs, argo, flux = OPERATOR_CASES[name]
    obj = _experiment(obs)
    assert obj["status"]["observedGeneration"] == obs.generation
    assert argo_health(obj)["status"] == argo
    assert flux_status(obj, _flux_check()) == flux


@pytest.mark.parametrize("name", ["training", "succeeded", "invalid-spec"])
def test_a_spec_the_operator_has_not_seen_is_progressing(name):
    obs, _, _ = OPERATOR_CASES[name]
    obj = _experiment(obs, generation=obs.generation + 1)
    assert argo_health(obj)["status"] == "Progressing"
    assert flux_status(obj, _flux_check()) == "InProgress"


def test_the_health_checks_and_their_fixtures_speak_the_operators_phases_and_condition_types():
    flux = (FLUX_DIR / "rlexperiment-health.yaml").read_text()
    phases = set(re.findall(r'status\.phase == "(\w+)"|status\.phase or "(\w+)"', HEALTH_LUA))
    phases = {p for pair in phases for p in pair if p} | set(re.findall(r"status\.phase == '(\w+)'", flux))
    types = set(re.findall(r'find\(conditions, "(\w+)"\)', HEALTH_LUA)) | set(re.findall(r"c\.type == '(\w+)'", flux))
    assert phases and phases <= set(Phase)
    assert types == {t.value for t in PHASE_CONDITIONS}
    for path in sorted((ARGO_DIR / "testdata").glob("*.yaml")):
        status = yaml.safe_load(path.read_text()).get("status") or {}
        assert status.get("phase", Phase.PENDING) in set(Phase), path.name
        assert {c["type"] for c in status.get("conditions") or []} <= set(ConditionType), path.name
