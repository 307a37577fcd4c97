"""An operator killed in the middle of a reconcile and started again makes nothing twice.

The emulator fails a chosen request (as a crash right before it would); the operator is stopped
while the reconcile is half done, the fault is cleared, and a fresh operator finishes the work.
"""

from __future__ import annotations

import time

import pytest

from kuberl_testing.fault_figures import report_figures
from kuberl_testing.operator_harness import OperatorHarness, experiment_body, wait_for

NAMESPACES = ["restart-c"] + [f"restart-step-{i}" for i in range(8)]
CHILDREN = (("pods", "exp-head", ""), ("pods", "exp-worker-0", ""), ("pods", "exp-worker-1", ""),
            ("configmaps", "exp-config", ""), ("services", "exp-head", ""), ("secrets", "exp-ray-token", ""),
            ("networkpolicies", "exp-ray", "networking.k8s.io"))


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness(NAMESPACES) as h:
        yield h


def fault(h, method: str, pattern: str, skip: int = 0) -> None:
    h.emulator_thread.call(h.emulator.inject_fault, method, pattern, 500, 1000, skip)


def fault_hits(h) -> int:
    return h.emulator_thread.call(h.emulator.fault_hits)


def clear(h) -> None:
    h.emulator_thread.call(h.emulator.clear_faults)


def assert_created_once(h, ns: str) -> None:
    for plural, name, group in CHILDREN:
        assert h.created_count(ns, plural, name, group) == 1, (plural, name)


# Every write of a first reconcile, in order: (method, path pattern, matching requests let through).
STEPS = [
    ("POST", r"/secrets$", 0), ("POST", r"/configmaps$", 0), ("POST", r"/services$", 0),
    ("POST", r"/networkpolicies$", 0), ("POST", r"/pods$", 0), ("POST", r"/pods$", 1), ("POST", r"/pods$", 2),
    ("PATCH", r"/rlexperiments/exp/status$", 0),
]


@pytest.mark.parametrize(("index", "step"), list(enumerate(STEPS)), ids=[f"{m} {p} +{k}" for m, p, k in STEPS])
def test_crash_at_each_step_of_a_reconcile_makes_nothing_twice(harness, index, step):
    ns = f"restart-step-{index}"
    method, pattern, skip = step
    hits = fault_hits(harness)
    fault(harness, method, rf"/namespaces/{ns}{pattern}", skip=skip)
    harness.apply(ns, experiment_body("exp", workers={"replicas": 2}))
    wait_for(lambda: fault_hits(harness) > hits, what=f"the reconcile to reach {method} {pattern}")
    harness.stop_operator()  # the crash: the reconcile stops right there
    clear(harness)
    restarted = time.monotonic()
    harness.start_operator()
    wait_for(lambda: len(harness.pods(ns)) == 3, what="all pods after the restart")
    wait_for(lambda: harness.status(ns, "exp").get("attempt") == 1, what="the status after the restart")
    recovery = time.monotonic() - restarted
    time.sleep(0.5)
    assert_created_once(harness, ns)
    assert harness.status(ns, "exp")["phase"] == "Pending"
    report_figures(f"operator-crash-before-{method} {pattern} +{skip}", recovery_seconds=recovery,
                   objects_created_twice=0)


def test_crash_after_recording_a_head_failure_counts_it_once(harness):
    ns = "restart-c"
    harness.apply(ns, experiment_body("exp", backoffLimit=3, workers={"replicas": 0}))
    wait_for(lambda: "exp-head" in harness.pods(ns))
    fault(harness, "DELETE", rf"/namespaces/{ns}/pods/exp-head$")
    harness.set_pod_status(ns, "exp-head", "Failed", exit_code=1, message="killed")
    wait_for(lambda: harness.get(ns, "exp")["metadata"].get("annotations", {}).get("kuberl.io/restarts") == "1",
             what="failure recorded")
    harness.stop_operator()
    clear(harness)
    restarted = time.monotonic()
    harness.start_operator()
    head = wait_for(lambda: harness.pods(ns).get("exp-head", {}).get("metadata", {}).get("annotations", {})
                    .get("kuberl.io/attempt") == "2", what="attempt 2 after the restart")
    assert head
    wait_for(lambda: harness.status(ns, "exp").get("attempt") == 2)
    annotations = harness.get(ns, "exp")["metadata"]["annotations"]
    assert annotations["kuberl.io/restarts"] == "1" and annotations["kuberl.io/failed-attempt"] == "1"
    assert harness.created_count(ns, "pods", "exp-head") == 2
    report_figures("operator-crash-after-recording-a-head-failure", recovery_seconds=time.monotonic() - restarted,
                   head_failures_counted=int(annotations["kuberl.io/restarts"]))
