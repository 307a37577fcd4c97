"""Builders for the platform features, field by field: Kueue pod groups, gang PodGroups, pod templates.

Every pod and PodGroup built here passes `kubernetes-validate --strict` (PodGroups: their upstream CRDs).
"""

from __future__ import annotations

import copy
import os
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from kuberl.api.field_errors import ManifestError
from kuberl.api.validation import validate_document
from kuberl.operator.builders import Owner, build_head_pod, build_worker_pod, resolve_experiment
from kuberl.operator.builders.podgroup import (
    KUEUE_GATE,
    Placement,
    build_pod_group,
    format_quantity,
    group_resources,
    place_pod,
    placement_of,
    pod_requests,
)
from kuberl.operator.builders.template import apply_template
from kuberl.operator.settings import Settings
from kuberl_testing.schemas import validate_strict

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
SETTINGS = Settings(trainer_image="registry.example/trainer:1", operator_namespace="kuberl-system",
                    prometheus_namespace="monitoring")
OWNER = Owner("cartpole", "research", "uid-123")
PORT = SETTINGS.status_port
QUEUE = {"kueue.x-k8s.io/queue-name": "research"}

TEMPLATE = {
    "metadata": {"labels": {"team": "rl"}, "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "imagePullSecrets": [{"name": "registry-creds"}],
        "runtimeClassName": "nvidia",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["train"]}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}}],
        "initContainers": [{"name": "fetch", "image": "busybox:1.37", "command": ["sh", "-c", "true"],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "containers": [{
            "env": [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}}],
            "envFrom": [{"configMapRef": {"name": "team-settings"}}],
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
            "resources": {"limits": {"example.com/fpga": "1"}},
        }],
    },
}


def experiment(name: str = "cartpole", labels: dict | None = None, **spec: object):
    base = {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 1000},
            "storage": {"uri": "s3://bucket/runs"}, "workers": {"replicas": 2}}
    base.update(spec)
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": name}, "spec": base}
    if labels:
        doc["metadata"]["labels"] = labels
    return resolve_experiment(validate_document(doc), SETTINGS, "research")


def pods_of(exp, placement: Placement = Placement(), attempt: int = 1) -> list[dict]:
    total = 1 + exp.spec.workers.replicas
    pods = [build_head_pod(exp, OWNER, attempt, status_port=PORT)]
    pods += [build_worker_pod(exp, OWNER, i, attempt, status_port=PORT) for i in range(exp.spec.workers.replicas)]
    placed = [place_pod(p, placement, OWNER, attempt=attempt, total=total) for p in pods]
    for pod in placed:
        validate_strict(pod)
    return placed


# --- Kueue ------------------------------------------------------------------------------------------------


def test_kueue_labels_every_pod_as_one_group_of_the_attempt():
    exp = experiment(labels=QUEUE)
    placement = placement_of(QUEUE, exp)
    assert placement.queue == "research" and placement.gang is None
    for pod in pods_of(exp, placement, attempt=3):
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels["kueue.x-k8s.io/queue-name"] == "research"
        assert labels["kueue.x-k8s.io/pod-group-name"] == "cartpole-a3"
        assert annotations["kueue.x-k8s.io/pod-group-total-count"] == "3"
        # The operator retries with a new group: this one ends once none of its pods runs.
        assert annotations["kueue.x-k8s.io/retriable-in-group"] == "false"
        assert labels["kuberl.io/experiment"] == "cartpole"  # the operator's labels stay
        assert annotations["kuberl.io/attempt"] == "3"
        # Kueue's own parts are Kueue's: its webhook gates the pods and marks them managed.
        assert "schedulingGates" not in pod["spec"]
        assert "kueue.x-k8s.io/managed" not in labels
        assert "schedulerName" not in pod["spec"]


def test_kueue_group_total_follows_the_workers_and_the_priority_class_label_is_passed_on():
    exp = experiment(labels={**QUEUE, "kueue.x-k8s.io/priority-class": "high"}, workers={"replicas": 0})
    (head,) = pods_of(exp, placement_of({**QUEUE, "kueue.x-k8s.io/priority-class": "high"}, exp))
    assert head["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "1"
    assert head["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"


def test_without_a_queue_label_the_pods_are_untouched():
    exp = experiment()
    pod = build_head_pod(exp, OWNER, 1, status_port=PORT)
    assert place_pod(pod, placement_of({"team": "x"}, exp), OWNER, attempt=1, total=3) == pod
    assert KUEUE_GATE == "kueue.x-k8s.io/admission"


# --- gang scheduling --------------------------------------------------------------------------------------


def test_volcano_pod_group_min_member_resources_priority_and_owner():
    exp = experiment(scheduling={"gang": True, "schedulerName": "volcano"}, priorityClassName="research-high",
                     head={"cpu": "2", "memory": "4Gi"},
                     workers={"replicas": 2, "cpu": "500m", "memory": "512Mi", "gpus": 1})
    placement = placement_of(None, exp)
    pods = pods_of(exp, placement)
    group = build_pod_group(exp, OWNER, placement, pods[0], pods[1])
    validate_strict(group)
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1" and group["kind"] == "PodGroup"
    assert group["metadata"]["name"] == "cartpole-group" and group["metadata"]["namespace"] == "research"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-123"
    assert group["metadata"]["ownerReferences"][0]["controller"] is True
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["minResources"] == {"cpu": "3", "memory": "5Gi", "nvidia.com/gpu": "2"}
    assert group["spec"]["priorityClassName"] == "research-high"
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "cartpole-group"
        assert pod["spec"]["priorityClassName"] == "research-high"


def test_scheduler_plugins_pod_group_and_pod_label():
    exp = experiment(scheduling={"gang": True, "schedulerName": "scheduler-plugins"}, priorityClassName="p1",
                     workers={"replicas": 3})
    placement = placement_of(None, exp)
    pods = pods_of(exp, placement)
    group = build_pod_group(exp, OWNER, placement, pods[0], pods[1])
    validate_strict(group)
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"]["minMember"] == 4
    assert "priorityClassName" not in group["spec"]  # not in this PodGroup's API: the pods carry it
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "cartpole-group"
        assert pod["spec"]["priorityClassName"] == "p1"


def test_pod_group_resizes_with_the_workers_and_is_none_without_gang():
    small = experiment(scheduling={"gang": True}, workers={"replicas": 1, "cpu": "1", "memory": "1Gi"})
    big = experiment(scheduling={"gang": True}, workers={"replicas": 4, "cpu": "1", "memory": "1Gi"})
    for exp, members, cpu in ((small, 2, "3"), (big, 5, "6")):
        placement = placement_of(None, exp)
        group = build_pod_group(exp, OWNER, placement, build_head_pod(exp, OWNER, 0, status_port=PORT),
                                build_worker_pod(exp, OWNER, 0, 0, status_port=PORT))
        assert group["spec"]["minMember"] == members and group["spec"]["minResources"]["cpu"] == cpu
    plain = experiment()
    plain_head = build_head_pod(plain, OWNER, 0, status_port=PORT)
    assert build_pod_group(plain, OWNER, placement_of(None, plain), plain_head, None) is None


def test_pod_requests_count_sidecars_and_the_largest_init_container():
    pod = {"spec": {
        "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}],
        "initContainers": [
            {"resources": {"requests": {"cpu": "4"}}},  # runs alone before the others
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
        ],
    }}
    assert pod_requests(pod) == {"cpu": Decimal("4"), "memory": Decimal(1024**3 + 256 * 1024**2),
                                 "nvidia.com/gpu": Decimal(1)}
    assert group_resources(pod, pod, 2)["cpu"] == "12"


@pytest.mark.parametrize(("key", "value", "text"), [
    ("cpu", Decimal("2.5"), "2500m"), ("cpu", Decimal("3"), "3"), ("memory", Decimal(3 * 1024**3), "3Gi"),
    ("memory", Decimal(1536 * 1024**2), "1536Mi"), ("memory", Decimal(1000), "1000"),
    ("nvidia.com/gpu", Decimal(4), "4"),
])
def test_format_quantity(key, value, text):
    assert format_quantity(key, value) == text


# --- pod templates ----------------------------------------------------------------------------------------


def _golden(name: str, body: dict) -> None:
    path = GOLDEN / name
    if os.environ.get("KUBERL_UPDATE_GOLDEN"):
        path.write_text(yaml.safe_dump(body, sort_keys=False))
    assert body == yaml.safe_load(path.read_text()), f"{name} differs (KUBERL_UPDATE_GOLDEN=1 rewrites it)"


def test_template_merge_golden_head_and_worker():
    exp = experiment(head={"template": TEMPLATE}, workers={"replicas": 1, "template": TEMPLATE})
    head, worker = pods_of(exp)
    _golden("template-head-pod.yaml", head)
    _golden("template-worker-pod.yaml", worker)


def test_template_merge_field_by_field():
    exp = experiment(storage={"uri": "s3://bucket/runs", "secretRef": {"name": "s3"}},
                     head={"template": TEMPLATE, "gpus": 1})
    plain = build_head_pod(experiment(storage={"uri": "s3://bucket/runs", "secretRef": {"name": "s3"}},
                                      head={"gpus": 1}), OWNER, 1, status_port=PORT)
    pod = build_head_pod(exp, OWNER, 1, status_port=PORT)
    meta, spec, main = pod["metadata"], pod["spec"], pod["spec"]["containers"][0]
    assert meta["labels"] == {**plain["metadata"]["labels"], "team": "rl"}
    assert meta["annotations"] == {**plain["metadata"]["annotations"], "sidecar.istio.io/inject": "false"}
    assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["affinity"] == TEMPLATE["spec"]["affinity"]
    assert spec["topologySpreadConstraints"] == TEMPLATE["spec"]["topologySpreadConstraints"]
    assert spec["volumes"] == plain["spec"]["volumes"] + TEMPLATE["spec"]["volumes"]
    (init,) = spec["initContainers"]
    assert init["image"] == "busybox:1.37" and init["securityContext"] == main["securityContext"]
    assert main["env"][: len(plain["spec"]["containers"][0]["env"])] == plain["spec"]["containers"][0]["env"]
    assert main["env"][-1]["name"] == "WANDB_API_KEY"
    assert main["envFrom"] == [{"configMapRef": {"name": "team-settings"}}]
    assert main["volumeMounts"][-1] == {"name": "data", "mountPath": "/data", "readOnly": True}
    assert main["resources"]["limits"] == {**plain["spec"]["containers"][0]["resources"]["limits"],
                                           "example.com/fpga": "1"}
    for field in ("image", "command", "ports", "securityContext"):
        assert main[field] == plain["spec"]["containers"][0][field]
    assert {k: v for k, v in spec.items() if k not in ("imagePullSecrets", "runtimeClassName", "affinity",
                                                        "topologySpreadConstraints", "volumes", "initContainers",
                                                        "containers")} == \
        {k: v for k, v in plain["spec"].items() if k not in ("volumes", "containers")}


def test_template_merge_is_pure():
    pod = build_head_pod(experiment(), OWNER, 1, status_port=PORT)
    before, template = copy.deepcopy(pod), copy.deepcopy(TEMPLATE)
    merged = apply_template(pod, template)
    merged["spec"]["volumes"].append({"name": "x"})
    merged["spec"]["initContainers"][0]["securityContext"]["runAsUser"] = 5
    assert pod == before and template == TEMPLATE
    assert apply_template(pod, None) == pod


def test_an_init_container_may_relax_the_read_only_root_but_stays_non_root():
    template = {"spec": {"initContainers": [{"name": "pip", "image": "python:3.11",
                                             "securityContext": {"readOnlyRootFilesystem": False}}]}}
    pod = build_worker_pod(experiment(workers={"replicas": 1, "template": template}), OWNER, 0, 1, status_port=PORT)
    validate_strict(pod)
    security = pod["spec"]["initContainers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] is False
    assert security["runAsNonRoot"] is True and security["allowPrivilegeEscalation"] is False


def test_an_init_containers_capabilities_keep_the_main_containers_drop_all():
    """Pod Security "restricted" asks every container to drop ALL: adding NET_BIND_SERVICE, or dropping one
    more capability, must not replace the drop the operator set."""
    for capabilities in ({"add": ["NET_BIND_SERVICE"]}, {"drop": ["NET_RAW"]}):
        template = {"spec": {"initContainers": [{"name": "i", "image": "busybox",
                                                 "securityContext": {"capabilities": capabilities}}]}}
        pod = build_head_pod(experiment(head={"template": template}), OWNER, 1, status_port=PORT)
        validate_strict(pod)
        merged = pod["spec"]["initContainers"][0]["securityContext"]["capabilities"]
        assert "ALL" in merged["drop"] and merged.get("add") == capabilities.get("add")
        assert set(capabilities.get("drop", [])) <= set(merged["drop"])


def _errors(role: str, template: dict, **spec: object) -> list[str]:
    with pytest.raises(ManifestError) as exc:
        experiment(**{role: {"template": template, **({"replicas": 1} if role == "workers" else {})}}, **spec)
    return [str(e) for e in exc.value.errors]


@pytest.mark.parametrize("role", ["head", "workers"])
@pytest.mark.parametrize(("template", "field", "says"), [
    ({"spec": {"hostNetwork": True}}, "spec.hostNetwork", "security"),
    ({"spec": {"hostPID": True}}, "spec.hostPID", "security"),
    ({"spec": {"hostIPC": True}}, "spec.hostIPC", "security"),
    ({"spec": {"securityContext": {"runAsUser": 0}}}, "spec.securityContext", "security"),
    ({"spec": {"containers": [{"image": "x"}]}}, "spec.containers[0].image", "spec.image"),
    ({"spec": {"containers": [{"command": ["sh"]}]}}, "spec.containers[0].command", "owned by the operator"),
    ({"spec": {"containers": [{"args": ["x"]}]}}, "spec.containers[0].args", "owned by the operator"),
    ({"spec": {"containers": [{"ports": []}]}}, "spec.containers[0].ports", "owned by the operator"),
    ({"spec": {"containers": [{"securityContext": {"privileged": True}}]}}, "spec.containers[0].securityContext",
     "security"),
    ({"spec": {"containers": [{"env": [{"name": "KUBERL_ATTEMPT", "value": "9"}]}]}},
     "spec.containers[0].env[0].name", "set by the operator"),
    ({"spec": {"containers": [{"env": [{"name": "RAY_AUTH_MODE", "value": "none"}]}]}},
     "spec.containers[0].env[0].name", "set by the operator"),
    ({"spec": {"containers": [{"resources": {"requests": {"memory": "1Gi"}}}]}},
     "spec.containers[0].resources.requests.memory", "memory instead"),
    ({"spec": {"containers": [{"volumeMounts": [{"name": "d", "mountPath": "/tmp"}]}]}},
     "spec.containers[0].volumeMounts[0].mountPath", "operator's"),
    ({"spec": {"containers": [{"name": "sidecar"}]}}, "spec.containers[0].name", "initContainers"),
    ({"spec": {"containers": [{}, {}]}}, "spec.containers", "at most 1"),
    ({"spec": {"volumes": [{"name": "config", "emptyDir": {}}]}}, "spec.volumes[0].name", "operator's volume"),
    ({"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}, "spec.volumes[0].hostPath", "security"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"privileged": True}}]}},
     "spec.initContainers[0].securityContext.privileged", "must be false"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"allowPrivilegeEscalation": True}}]}},
     "spec.initContainers[0].securityContext.allowPrivilegeEscalation", "must be false"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"runAsNonRoot": False}}]}},
     "spec.initContainers[0].securityContext.runAsNonRoot", "must be true"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}},
     "spec.initContainers[0].securityContext.capabilities.add[0]", "NET_BIND_SERVICE"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]}},
     "spec.initContainers[0].securityContext.seccompProfile.type", "RuntimeDefault"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]}},
     "spec.initContainers[0].securityContext.appArmorProfile.type", "RuntimeDefault"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"seLinuxOptions": {"type": "spc_t"}}}]}},
     "spec.initContainers[0].securityContext.seLinuxOptions.type", "container_t"),
    ({"spec": {"initContainers": [{"name": "i", "securityContext": {"seLinuxOptions": {"user": "root"}}}]}},
     "spec.initContainers[0].securityContext.seLinuxOptions.user", ""),
    ({"spec": {"nodeSelector": {"a": "b"}}}, "spec.nodeSelector", "nodeSelector instead"),
    ({"spec": {"serviceAccountName": "root"}}, "spec.serviceAccountName", "spec.serviceAccountName instead"),
    ({"spec": {"schedulerName": "x"}}, "spec.schedulerName", "spec.scheduling"),
    ({"spec": {"dnsPolicy": "None"}}, "spec.dnsPolicy", "allowed here"),
    ({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}}, "metadata.labels.kueue.x-k8s.io/queue-name",
     "RLExperiment itself"),
    ({"metadata": {"name": "x"}}, "metadata.name", "allowed here"),
    ({"spec": {"imagePullSecrets": "creds"}}, "spec.imagePullSecrets", "must be an array"),
])
def test_refused_template_fields_are_named(role, template, field, says):
    errors = _errors(role, template)
    match = [e for e in errors if e.startswith(f"spec.{role}.template.{field}: ")]
    assert match, errors
    assert says in match[0]


def test_storage_credentials_belong_to_the_secret_ref_only_when_one_is_set():
    template = {"spec": {"containers": [{"env": [{"name": "AWS_REGION", "value": "eu-west-1"}]}]}}
    experiment(head={"template": template})  # no secretRef: a region for IRSA and the like is fine
    errors = _errors("head", template, storage={"uri": "s3://bucket/runs", "secretRef": {"name": "s3"}})
    assert errors == ["spec.head.template.spec.containers[0].env[0].name: 'AWS_REGION' is set by the operator"]


@pytest.mark.parametrize("spec", [
    {},
    {"head": {"gpus": 1, "nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "dedicated", "operator": "Exists"}]},
     "learner": {"gpus": 1}},
    {"storage": {"uri": "s3://bucket/runs", "secretRef": {"name": "s3"}}, "serviceAccountName": "trainer",
     "priorityClassName": "high", "workers": {"replicas": 2, "gpus": 2}},
    {"scheduling": {"gang": True, "schedulerName": "scheduler-plugins"}, "head": {"template": TEMPLATE}},
], ids=["plain", "gpu-head", "secret-sa-priority", "gang-template"])
def test_every_built_pod_passes_strict_kubernetes_validation(spec):
    exp = experiment(labels=QUEUE, **spec)
    placement = placement_of(QUEUE, exp)
    pods = pods_of(exp, placement)  # validates each pod
    group = build_pod_group(exp, OWNER, placement, pods[0], pods[1] if len(pods) > 1 else None)
    if group is not None:
        validate_strict(group)
