"""One bad-input case of each class through the real Kopf operator on the API emulator.

The emulator does not apply the CRD schema (as with `kubectl apply --validate=false`, or a CRD
older than the operator), so every case reaches the operator, which must answer each with phase
Failed, Stalled=True/InvalidSpec naming the field, one Warning event naming it, no children, and
then silence: no status writes and no new events (no retry loop).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from kuberl_testing.bad_inputs import CASES, CLASSES, ENV, BadInput
from kuberl_testing.fault_figures import report_figures
from kuberl_testing.operator_harness import OperatorHarness, wait_for

REPRESENTATIVE = {  # class -> case id
    "wrong-type": "wrong-type-rollouts.workers-many",
    "malformed": "malformed-head.cpu-two",
    "out-of-range": "out-of-range-rollouts.workers-1",
    "unknown-enum": "unknown-enum-algorithm-a3c",
    "missing-required": "missing-required-env.id-deleted",
    "unknown-field": "unknown-field-rollouts.workerz-2",
    "inconsistent": "inconsistent-learner.gpus-1",
    "hostile": "hostile-env.config-a_a",  # 80 levels deep: crashed the ConfigMap serializer before
}
QUIET_SECONDS = 4.0
NAMESPACES = [f"bad-{i}" for i in range(len(REPRESENTATIVE) + 1)]
CHILD_KINDS = (("", "pods"), ("", "configmaps"), ("", "services"), ("", "secrets"),
               ("networking.k8s.io", "networkpolicies"))


def representative_cases() -> list[BadInput]:
    by_id = {c.id: c for c in CASES}
    return [by_id[REPRESENTATIVE[kind]] for kind in CLASSES]


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness(NAMESPACES) as h:
        yield h


def test_every_class_has_a_representative():
    assert set(REPRESENTATIVE) == set(CLASSES)
    assert all(c.catcher != ENV for c in representative_cases())


def test_each_class_fails_once_with_the_field_named_and_no_children(harness):
    cases = representative_cases()
    applied = {}
    for namespace, case in zip(NAMESPACES, cases, strict=False):
        harness.apply(namespace, case.manifest(name="bad"))
        applied[namespace] = (case, time.perf_counter())
    verdict_seconds = {}
    for namespace, (case, started) in applied.items():
        wait_for(lambda ns=namespace: harness.status(ns, "bad").get("phase") == "Failed", timeout=30,
                 interval=0.02, what=f"{case.id}: phase Failed")
        verdict_seconds[case.kind] = round(time.perf_counter() - started, 2)
        stalled = harness.condition(namespace, "bad", "Stalled")
        assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec", stalled
        assert case.field_path in stalled["message"], (case.id, stalled["message"])
        assert harness.condition(namespace, "bad", "Succeeded")["status"] == "False"
        warnings = wait_for(lambda ns=namespace: [e for e in harness.events(ns) if e["reason"] == "InvalidSpec"],
                            what=f"{case.id}: InvalidSpec event")
        assert warnings[0]["type"] == "Warning" and case.field_path in warnings[0]["message"]
    # The verdict is final: nothing more is written, nothing is created, no event repeats.
    before = {ns: (harness.get(ns, "bad")["metadata"]["resourceVersion"], len(harness.events(ns)))
              for ns in applied}
    time.sleep(QUIET_SECONDS)
    for namespace, (case, _) in applied.items():
        after = (harness.get(namespace, "bad")["metadata"]["resourceVersion"], len(harness.events(namespace)))
        assert after == before[namespace], f"{case.id}: the operator kept writing: {before[namespace]} -> {after}"
        assert len([e for e in harness.events(namespace) if e["reason"] == "InvalidSpec"]) == 1
        for group, plural in CHILD_KINDS:
            assert harness.objects(namespace, plural, group) == [], f"{case.id}: {plural} created"
    for kind, seconds in verdict_seconds.items():
        report_figures(f"bad input ({kind}) through the operator", failed_after_s=seconds, pods=0,
                       writes_after_verdict=0, quiet_window_s=QUIET_SECONDS)


def test_env_id_of_a_module_that_raises_is_never_imported_by_the_operator(harness, tmp_path: Path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "badmod_kuberl_test.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\nraise RuntimeError('badmod refuses to be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # importable by this process, where the operator runs
    namespace = NAMESPACES[-1]
    harness.apply(namespace, BadInput("env.id", "badmod_kuberl_test:Env", "hostile", False, ENV).manifest("mod"))
    wait_for(lambda: "mod-head" in harness.pods(namespace), what="the head pod: the trainer checks the env")
    assert not marker.exists() and "badmod_kuberl_test" not in sys.modules
    assert harness.status(namespace, "mod").get("phase") != "Failed"
