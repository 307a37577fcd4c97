"""Admission and gang scheduling: Kueue pod groups and the gang schedulers' PodGroup objects.

Kueue (plain-pod integration): an RLExperiment labelled `kueue.x-k8s.io/queue-name` gets its head and
workers created as one Kueue pod group: every pod carries the queue-name label, the
`kueue.x-k8s.io/pod-group-name` label and the `kueue.x-k8s.io/pod-group-total-count` annotation. Kueue
does the rest itself: its webhook adds the `kueue.x-k8s.io/admission` scheduling gate (and its
`kueue.x-k8s.io/managed` label and finalizer), and it removes the gate from the whole group once the
group is admitted. Each attempt is its own group (a new head forms a new group), marked
`kueue.x-k8s.io/retriable-in-group: "false"`: the operator, not Kueue, retries, so a group is finished
(and Kueue lets go of its pods' finalizers) as soon as none of its pods runs or waits. Without that,
Kueue would hold every deleted pod of a failed, preempted, suspended or finished attempt until
replacement pods joined the same group, and a new attempt could never reuse the pods' names.

Gang scheduling (`spec.scheduling.gang`): the scheduler's PodGroup with minMember = head + workers and
the summed requests, and on every pod the scheduler's name and the group label or annotation.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from kuberl.api.types import RLExperiment
from kuberl.operator import names
from kuberl.operator.builders.common import Owner, metadata

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass, passed on as is
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
KUEUE_GATE = "kueue.x-k8s.io/admission"  # Kueue's own scheduling gate (its webhook adds it)


@dataclass(frozen=True)
class GangScheduler:
    scheduler_name: str  # the pods' spec.schedulerName
    api_version: str
    group_label: str | None = None
    group_annotation: str | None = None
    has_priority: bool = False  # whether the PodGroup spec has priorityClassName


GANG_SCHEDULERS = {
    "volcano": GangScheduler("volcano", "scheduling.volcano.sh/v1beta1",
                             group_annotation="scheduling.k8s.io/group-name", has_priority=True),
    # The coscheduling plugin, run as a second scheduler under the name its Helm chart gives it.
    "scheduler-plugins": GangScheduler("scheduler-plugins-scheduler", "scheduling.x-k8s.io/v1alpha1",
                                       group_label="scheduling.x-k8s.io/pod-group"),
}
POD_GROUP_KIND = "PodGroup"


@dataclass(frozen=True)
class Placement:
    """How an experiment's pods are admitted and scheduled, beyond the default scheduler."""

    queue: str | None = None
    kueue_priority: str | None = None
    gang: GangScheduler | None = None


def placement_of(experiment_labels: dict[str, str] | None, experiment: RLExperiment) -> Placement:
    labels = experiment_labels or {}
    scheduling = experiment.spec.scheduling
    return Placement(queue=labels.get(QUEUE_LABEL) or None, kueue_priority=labels.get(KUEUE_PRIORITY_LABEL) or None,
                     gang=GANG_SCHEDULERS[scheduling.scheduler_name] if scheduling.gang else None)


def place_pod(pod: dict[str, Any], placement: Placement, owner: Owner, *, attempt: int, total: int) -> dict[str, Any]:
    """The pod with its Kueue group and gang scheduler fields; `total`: head + workers of the attempt."""
    meta = {**pod["metadata"], "labels": dict(pod["metadata"].get("labels") or {}),
            "annotations": dict(pod["metadata"].get("annotations") or {})}
    spec = dict(pod["spec"])
    if placement.queue:
        meta["labels"][QUEUE_LABEL] = placement.queue
        meta["labels"][KUEUE_GROUP_LABEL] = names.kueue_group_name(owner.name, attempt)
        meta["annotations"][KUEUE_TOTAL_ANNOTATION] = str(total)
        meta["annotations"][KUEUE_RETRIABLE_ANNOTATION] = "false"
        if placement.kueue_priority:
            meta["labels"][KUEUE_PRIORITY_LABEL] = placement.kueue_priority
    if placement.gang:
        spec["schedulerName"] = placement.gang.scheduler_name
        group = names.pod_group_name(owner.name)
        if placement.gang.group_label:
            meta["labels"][placement.gang.group_label] = group
        if placement.gang.group_annotation:
            meta["annotations"][placement.gang.group_annotation] = group
    return {**pod, "metadata": meta, "spec": spec}


# --- the gang scheduler's PodGroup ------------------------------------------------------------------------


def _add(total: dict[str, Decimal], amounts: dict[str, Decimal]) -> None:
    for key, value in amounts.items():
        total[key] = total.get(key, Decimal(0)) + value


def _container_requests(container: dict[str, Any]) -> dict[str, Decimal]:
    """What a container asks for: its requests, and its limits where a request is unset (as the API server
    defaults them; extended resources such as GPUs are given as limits only)."""
    resources = container.get("resources") or {}
    amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {key: parse_quantity(value) for key, value in amounts.items()}


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """A pod's effective requests as the scheduler counts them: the containers and native sidecars together,
    or the largest plain init container where that is more."""
    spec = pod["spec"]
    running: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        _add(running, _container_requests(container))
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("initContainers") or []:
        amounts = _container_requests(container)
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the main container
            _add(running, amounts)
        else:
            for key, value in amounts.items():
                init_peak[key] = max(init_peak.get(key, Decimal(0)), value)
    return {key: max(running.get(key, Decimal(0)), init_peak.get(key, Decimal(0)))
            for key in sorted(set(running) | set(init_peak))}


def format_quantity(key: str, value: Decimal) -> str:
    if key == "cpu" and value != value.to_integral_value():
        return f"{int((value * 1000).to_integral_value())}m"
    if key in ("memory", "ephemeral-storage"):
        for suffix, size in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
            if value % size == 0 and value >= size:
                return f"{int(value // size)}{suffix}"
    return str(int(value)) if value == value.to_integral_value() else str(value.normalize())


def group_resources(head_pod: dict[str, Any], worker_pod: dict[str, Any] | None, replicas: int) -> dict[str, str]:
    """minResources: the head's requests plus `replicas` times one worker's."""
    total = dict(pod_requests(head_pod))
    if worker_pod is not None and replicas:
        _add(total, {key: value * replicas for key, value in pod_requests(worker_pod).items()})
    return {key: format_quantity(key, value) for key, value in sorted(total.items())}


def build_pod_group(experiment: RLExperiment, owner: Owner, placement: Placement, head_pod: dict[str, Any],
                    worker_pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The gang scheduler's PodGroup, or None without gang scheduling."""
    if placement.gang is None:
        return None
    replicas = experiment.spec.workers.replicas
    spec: dict[str, Any] = {"minMember": 1 + replicas,
                            "minResources": group_resources(head_pod, worker_pod, replicas)}
    if placement.gang.has_priority and experiment.spec.priority_class_name:
        spec["priorityClassName"] = experiment.spec.priority_class_name
    return {
        "apiVersion": placement.gang.api_version,
        "kind": POD_GROUP_KIND,
        "metadata": metadata(owner, names.pod_group_name(owner.name)),
        "spec": spec,
    }
