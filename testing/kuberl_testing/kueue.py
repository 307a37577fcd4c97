"""A stand-in for Kueue's plain-pod integration, for the API emulator: what Kueue does to a pod group.

`kueue_webhook` is Kueue's mutating webhook (an emulator admission hook): a pod with the queue-name
label gets the `kueue.x-k8s.io/admission` scheduling gate, the `kueue.x-k8s.io/managed` label and
Kueue's finalizer. `admit` is Kueue admitting the group: it removes the gate from every pod of the group.
`preempt` is Kueue stopping an admitted group: a DisruptionTarget condition on each pod, then a delete
(the finalizer keeps the pod visible until `release` removes it, as Kueue does once the group is
finished: with `retriable-in-group: "false"`, when none of its pods runs or waits any more).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s

from kuberl.operator.builders.podgroup import KUEUE_GATE, KUEUE_GROUP_LABEL, QUEUE_LABEL

MANAGED_LABEL = "kueue.x-k8s.io/managed"
FINALIZER = "kueue.x-k8s.io/managed"
STOPPED_REASON = "StoppedByKueue"
MERGE_PATCH = "application/merge-patch+json"


def kueue_webhook(group: str, plural: str, obj: dict[str, Any], *, finalizer: bool = True) -> None:
    """`finalizer=False` where no Kueue controller runs that would ever remove it (the e2e stand-in)."""
    if group or plural != "pods" or not (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL):
        return
    spec = obj.setdefault("spec", {})
    gates = spec.setdefault("schedulingGates", [])
    if not any(g.get("name") == KUEUE_GATE for g in gates):
        gates.append({"name": KUEUE_GATE})
    obj["metadata"].setdefault("labels", {})[MANAGED_LABEL] = "true"
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if finalizer and FINALIZER not in finalizers:
        finalizers.append(FINALIZER)


def group_pods(core: k8s.CoreV1Api, namespace: str, group: str) -> list[dict[str, Any]]:
    items = json.loads(core.list_namespaced_pod(namespace, label_selector=f"{KUEUE_GROUP_LABEL}={group}",
                                                _preload_content=False).data)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def admit(core: k8s.CoreV1Api, namespace: str, group: str) -> list[str]:
    """Remove Kueue's gate from the group's pods; the names of the pods admitted."""
    admitted = []
    for pod in group_pods(core, namespace, group):
        gates = [g for g in pod["spec"].get("schedulingGates") or [] if g.get("name") != KUEUE_GATE]
        core.patch_namespaced_pod(pod["metadata"]["name"], namespace, {"spec": {"schedulingGates": gates or None}},
                                  _content_type=MERGE_PATCH, _preload_content=False)
        admitted.append(pod["metadata"]["name"])
    return admitted


def preempt(core: k8s.CoreV1Api, namespace: str, group: str) -> None:
    for pod in group_pods(core, namespace, group):
        name = pod["metadata"]["name"]
        condition = {"type": "DisruptionTarget", "status": "True", "reason": STOPPED_REASON,
                     "message": "Preempted to accommodate a higher priority Workload"}
        core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}},
                                         _content_type=MERGE_PATCH, _preload_content=False)
        core.delete_namespaced_pod(name, namespace, _preload_content=False)


def release(core: k8s.CoreV1Api, namespace: str, name: str) -> None:
    """Remove Kueue's finalizer from a pod (a deleted pod then goes)."""
    core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}}, _content_type=MERGE_PATCH,
                              _preload_content=False)
