"""The real Kopf operator against the API emulator: Kueue pod groups, gang PodGroups and pod templates.

The emulator runs Kueue's stand-in webhook (kuberl_testing.kueue: queued pods are gated on creation) and
serves the upstream PodGroup CRDs; the tests do what Kueue and the kubelet would (remove the gate,
preempt, report pod phases). Every pod and PodGroup the operator creates passes the strict schemas.
"""

from __future__ import annotations

import itertools

import pytest
import yaml
from kubernetes import client as k8s

from kuberl_testing import kueue
from kuberl_testing.operator_harness import OperatorHarness, TrainerStatusServer, experiment_body, wait_for
from kuberl_testing.ports import free_port
from kuberl_testing.schemas import podgroup_crds, validate_strict

NAMESPACES = [f"plat-{i}" for i in range(12)]
_namespaces = iter(NAMESPACES)
STATUS_PORT = free_port()
QUEUE = {"kueue.x-k8s.io/queue-name": "research"}
GATE = {"name": "kueue.x-k8s.io/admission"}
_ips = itertools.count(2)


@pytest.fixture(scope="module")
def harness():
    with OperatorHarness(NAMESPACES, env={"KUBERL_STATUS_PORT": str(STATUS_PORT)}) as h:
        h.emulator_thread.call(h.emulator.add_admission, kueue.kueue_webhook)
        extensions = k8s.ApiextensionsV1Api(h.api)
        for crd in podgroup_crds():
            extensions.create_custom_resource_definition(crd)
        yield h


@pytest.fixture
def ns() -> str:
    return next(_namespaces)


def queued_body(name: str, **spec) -> dict:
    body = experiment_body(name, **spec)
    body["metadata"]["labels"] = dict(QUEUE)
    return body


def run_pods(h: OperatorHarness, ns: str, head_ip: str) -> None:
    for name, pod in h.pods(ns).items():
        if not pod["metadata"].get("deletionTimestamp"):
            h.set_pod_status(ns, name, "Running", ip=head_ip if name.endswith("-head") else f"10.2.0.{next(_ips)}")


def test_queued_experiment_waits_for_kueue_then_runs(harness, ns):
    trainer = TrainerStatusServer({"phase": "Running", "attempt": 1, "iteration": 1}, STATUS_PORT)
    try:
        harness.apply(ns, queued_body("q", workers={"replicas": 2}))
        pods = wait_for(lambda: len(harness.pods(ns)) == 3 and harness.pods(ns), what="the group's three pods")
        for pod in pods.values():
            validate_strict({k: v for k, v in pod.items() if k != "status"})
            meta = pod["metadata"]
            assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "research"
            assert meta["labels"]["kueue.x-k8s.io/pod-group-name"] == "q-a1"
            assert meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
            assert meta["annotations"]["kueue.x-k8s.io/retriable-in-group"] == "false"
            assert pod["spec"]["schedulingGates"] == [GATE]  # Kueue's webhook gated it
        wait_for(lambda: harness.status(ns, "q").get("phase") == "Queued", what="phase Queued")
        ready = harness.condition(ns, "q", "Ready")
        assert ready["status"] == "False" and ready["reason"] == "Queued" and "Kueue" in ready["message"]
        events = wait_for(lambda: [e for e in harness.events(ns) if e["reason"] == "Queued"],
                          what=f"Queued event among {[(e['reason'], e['message']) for e in harness.events(ns)]}")
        assert events[0]["type"] == "Normal"

        assert sorted(kueue.admit(harness.core, ns, "q-a1")) == ["q-head", "q-worker-0", "q-worker-1"]
        wait_for(lambda: harness.status(ns, "q").get("phase") == "Pending", what="admitted: Pending")
        run_pods(harness, ns, trainer.ip)
        wait_for(lambda: harness.status(ns, "q").get("phase") == "Running", what="phase Running")
        assert harness.created_count(ns, "pods", "q-head") == 1
    finally:
        trainer.close()


def test_a_scale_change_of_a_queued_group_is_refused_with_the_reason(harness, ns):
    harness.apply(ns, queued_body("qs", workers={"replicas": 1}))
    wait_for(lambda: harness.status(ns, "qs").get("phase") == "Queued", what="phase Queued")
    harness.patch_spec(ns, "qs", {"workers": {"replicas": 3}})
    stalled = wait_for(lambda: harness.condition(ns, "qs", "Stalled").get("reason") == "SpecChangeRefused"
                       and harness.condition(ns, "qs", "Stalled"), what="the refusal")
    assert "spec.workers.replicas" in stalled["message"] and "fixed size" in stalled["message"]
    assert sorted(harness.pods(ns)) == ["qs-head", "qs-worker-0"]  # the group stays as Kueue queued it
    assert harness.status(ns, "qs")["phase"] == "Queued"
    # Suspend, resize, resume: a new group of the new size, queued afresh.
    harness.patch_spec(ns, "qs", {"suspend": True})
    wait_for(lambda: harness.status(ns, "qs").get("phase") == "Suspended", what="Suspended")
    for name in list(harness.pods(ns)):
        kueue.release(harness.core, ns, name)  # Kueue lets go of its pods once they are deleted
    wait_for(lambda: harness.pods(ns) == {}, what="pods gone")
    harness.patch_spec(ns, "qs", {"suspend": False})
    pods = wait_for(lambda: len(harness.pods(ns)) == 4 and harness.pods(ns), what="a group of four")
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods.values()} == {"qs-a2"}
    assert {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for p in pods.values()} == {"4"}
    wait_for(lambda: harness.condition(ns, "qs", "Stalled").get("status") == "False", what="refusal cleared")


def test_kueue_preemption_resumes_without_counting_against_the_backoff_limit(harness, ns):
    trainer = TrainerStatusServer({"phase": "Running", "attempt": 1, "iteration": 4}, STATUS_PORT)
    try:
        harness.apply(ns, queued_body("qp", workers={"replicas": 1}, backoffLimit=0))
        wait_for(lambda: len(harness.pods(ns)) == 2, what="pods")
        kueue.admit(harness.core, ns, "qp-a1")
        run_pods(harness, ns, trainer.ip)
        wait_for(lambda: harness.status(ns, "qp").get("phase") == "Running", what="Running")
        kueue.preempt(harness.core, ns, "qp-a1")
        event = wait_for(lambda: [e for e in harness.events(ns) if e["reason"] == "Preempted"], what="Preempted")
        assert "not counted against backoffLimit" in event[0]["message"]
        for name in list(harness.pods(ns)):
            kueue.release(harness.core, ns, name)
        head = wait_for(lambda: (harness.pods(ns).get("qp-head") or {}).get("metadata", {})
                        .get("annotations", {}).get("kuberl.io/attempt") == "2" and harness.pods(ns)["qp-head"],
                        what="attempt 2")
        assert head["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "qp-a2"
        assert head["spec"]["schedulingGates"] == [GATE]  # queued again, as a new group
        wait_for(lambda: harness.status(ns, "qp").get("phase") == "Queued", what="queued again")
        annotations = harness.get(ns, "qp")["metadata"].get("annotations") or {}
        assert annotations.get("kuberl.io/restarts", "0") == "0"  # backoffLimit 0 and still not Failed
    finally:
        trainer.close()


@pytest.mark.parametrize(("scheduler", "group"), [("volcano", "scheduling.volcano.sh"),
                                                  ("scheduler-plugins", "scheduling.x-k8s.io")])
def test_gang_pod_group_is_sized_resized_and_deleted_with_the_experiment(harness, scheduler, group):
    ns = next(_namespaces)
    harness.apply(ns, experiment_body("g", workers={"replicas": 1, "cpu": "1", "memory": "1Gi"},
                                      head={"cpu": "1", "memory": "2Gi"}, priorityClassName="research",
                                      scheduling={"gang": True, "schedulerName": scheduler}))
    groups = wait_for(lambda: harness.objects(ns, "podgroups", group), what="the PodGroup")
    (pod_group,) = groups
    validate_strict({k: v for k, v in pod_group.items() if k != "status"})
    assert pod_group["metadata"]["name"] == "g-group"
    assert pod_group["metadata"]["ownerReferences"][0]["uid"] == harness.get(ns, "g")["metadata"]["uid"]
    assert pod_group["spec"]["minMember"] == 2
    assert pod_group["spec"]["minResources"] == {"cpu": "2", "memory": "3Gi"}
    assert ("priorityClassName" in pod_group["spec"]) == (scheduler == "volcano")
    pods = wait_for(lambda: len(harness.pods(ns)) == 2 and harness.pods(ns), what="pods")
    for pod in pods.values():
        assert pod["spec"]["schedulerName"] in ("volcano", "scheduler-plugins-scheduler")
        validate_strict({k: v for k, v in pod.items() if k != "status"})
    harness.custom.patch_namespaced_custom_object_scale("kuberl.io", "v1alpha1", ns, "rlexperiments", "g",
                                                        {"spec": {"replicas": 3}},
                                                        _content_type="application/merge-patch+json")
    resized = wait_for(lambda: harness.objects(ns, "podgroups", group)[0]["spec"]["minMember"] == 4
                       and harness.objects(ns, "podgroups", group)[0], what="resized to 4")
    assert resized["spec"]["minResources"] == {"cpu": "4", "memory": "5Gi"}
    wait_for(lambda: len(harness.pods(ns)) == 4, what="four pods")
    harness.delete(ns, "g")
    wait_for(lambda: harness.objects(ns, "podgroups", group) == [], what="the PodGroup deleted with it")


def test_a_gang_experiment_without_its_scheduler_installed_fails_fast(harness, ns):
    # The API answers 404 for PodGroups, as a cluster without Volcano's CRD does.
    body = experiment_body("nog", scheduling={"gang": True, "schedulerName": "volcano"})
    harness.emulator_thread.call(harness.emulator.inject_fault, "POST",
                                 rf"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups$", 404, 100, 0)
    try:
        harness.apply(ns, body)
        wait_for(lambda: harness.status(ns, "nog").get("phase") == "Failed", what="Failed")
        stalled = harness.condition(ns, "nog", "Stalled")
        assert stalled["reason"] == "CreateRejected" and "spec.scheduling.gang" in stalled["message"]
        assert harness.pods(ns) == {}
    finally:
        harness.emulator_thread.call(harness.emulator.clear_faults)


def test_template_reaches_both_pod_kinds(harness, ns):
    template = {
        "metadata": {"annotations": {"example.com/team": "rl"}},
        "spec": {
            "imagePullSecrets": [{"name": "registry-creds"}],
            "volumes": [{"name": "data", "configMap": {"name": "datasets"}}],
            "containers": [{
                "env": [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
        },
    }
    harness.apply(ns, experiment_body("tpl", head={"template": template},
                                      workers={"replicas": 1, "template": template}))
    pods = wait_for(lambda: len(harness.pods(ns)) == 2 and harness.pods(ns), what="pods")
    for pod in pods.values():
        validate_strict({k: v for k, v in pod.items() if k != "status"})
        spec, main = pod["spec"], pod["spec"]["containers"][0]
        assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
        assert {"name": "data", "configMap": {"name": "datasets"}} in spec["volumes"]
        assert main["env"][-1] == template["spec"]["containers"][0]["env"][0]
        assert {"name": "data", "mountPath": "/data"} in main["volumeMounts"]
        assert pod["metadata"]["annotations"]["example.com/team"] == "rl"
        assert main["image"] != "evil"
    config = yaml.safe_load(harness.objects(ns, "configmaps")[0]["data"]["experiment.yaml"])
    assert config["spec"]["head"]["template"] == template  # the trainer sees the spec as applied


@pytest.mark.parametrize(("template", "field"), [
    ({"spec": {"containers": [{"image": "evil:1"}]}}, "spec.head.template.spec.containers[0].image"),
    ({"spec": {"hostNetwork": True}}, "spec.head.template.spec.hostNetwork"),
    ({"spec": {"containers": [{"env": [{"name": "RAY_AUTH_MODE", "value": "none"}]}]}},
     "spec.head.template.spec.containers[0].env[0].name"),
])
def test_refused_template_fields_fail_the_experiment_naming_the_field(harness, template, field):
    ns = next(_namespaces)
    harness.apply(ns, experiment_body("bad", head={"template": template}))
    wait_for(lambda: harness.status(ns, "bad").get("phase") == "Failed", what="Failed")
    stalled = harness.condition(ns, "bad", "Stalled")
    assert stalled["reason"] == "InvalidSpec" and field in stalled["message"]
    assert harness.pods(ns) == {}
