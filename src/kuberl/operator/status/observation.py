"""Observe: what a decision needs from the API objects (pods, the experiment's status, the spec), read
into typed values. Pure; the API reads themselves are in reconcile.py."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from pydantic import ValidationError

from kuberl.api.base import manifest_names
from kuberl.api.contract import ATTEMPT_ANNOTATION, ROLE_LABEL, WORKER_ROLE, TerminationSummary, TrainerStatus
from kuberl.api.types import RLExperimentStatus
from kuberl.operator.builders.podgroup import KUEUE_GATE

# Fields a running experiment can change; any other spec change waits for suspend or a new experiment.
MUTABLE_FIELDS = ("workers.replicas", "suspend", "backoffLimit", "ttlSecondsAfterFinished")
# Under Kueue the pod group's size is fixed once queued (pod-group-total-count): a new size needs a new group.
KUEUE_MUTABLE_FIELDS = tuple(f for f in MUTABLE_FIELDS if f != "workers.replicas")
# The status keys the operator writes; any other key of a stored status is left as it is.
STATUS_FIELDS = frozenset(manifest_names(RLExperimentStatus))
# The kubelet's waiting reasons that no wait will cure, and its reason for a container killed at its memory limit.
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CONFIG_ERROR_REASONS = frozenset({"CreateContainerConfigError"})
KUBELET_OOM_KILLED = "OOMKilled"


class PodPhase(StrEnum):
    """A Kubernetes pod's `status.phase` (not the experiment's `Phase`, though four names are the same)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class PodState:
    name: str
    role: str  # head | worker
    attempt: int
    phase: str  # a PodPhase
    index: int | None = None
    deleting: bool = False
    exit_code: int | None = None
    termination: TerminationSummary | None = None  # the trainer's JSON summary, when it wrote one
    termination_text: str = ""
    waiting_reason: str | None = None
    waiting_message: str = ""
    image: str = ""
    ip: str | None = None
    termination_reason: str | None = None  # the kubelet's: Completed | Error | OOMKilled | ...
    memory_limit: str | None = None  # the container's resources.limits.memory
    gated: bool = False  # Kueue's admission gate is on: the pod group waits in its queue
    disruption: str | None = None  # the reason of a DisruptionTarget condition (preempted, evicted)
    running_image: str = ""  # the container status's image and imageID (the digest), once it has started
    image_id: str = ""

    @property
    def oom_killed(self) -> bool:
        return self.termination_reason == KUBELET_OOM_KILLED


@dataclass(frozen=True)
class Observation:
    generation: int
    now: datetime.datetime
    previous: RLExperimentStatus  # the stored .status (status_of)
    spec_errors: tuple[str, ...] = ()
    replicas: int = 0
    backoff_limit: int = 3
    suspend: bool = False
    ttl_seconds: int | None = None
    refused_changes: tuple[str, ...] = ()  # immutable fields changed while pods run
    invalid_edit: tuple[str, ...] = ()  # the errors of an edit made while pods run: they go on with what they run
    missing_secret: str | None = None
    create_rejected: str | None = None  # the API server refused a child for good (400/403/422)
    quota_exceeded: str | None = None  # a ResourceQuota refused a pod for now (the API server's message)
    pods: tuple[PodState, ...] = ()
    trainer: TrainerStatus | None = None  # the head's /status JSON, when reachable
    restarts: int = 0  # head failures counted so far (annotation)
    failed_attempt: int = 0  # the highest attempt already counted as failed (annotation)
    kueue: bool = False  # admitted by Kueue as a pod group (the experiment's queue-name label)


def status_of(stored: dict[str, Any] | None) -> RLExperimentStatus:
    """The experiment's stored `.status`, typed. Keys the operator does not write are left out, and so is
    a value that does not validate (written by another version, say): a pass decides it afresh."""
    known = {k: v for k, v in (stored or {}).items() if k in STATUS_FIELDS and v is not None}
    try:
        return RLExperimentStatus.model_validate(known)
    except ValidationError as exc:
        bad = {error["loc"][0] for error in exc.errors() if error["loc"]}
        return RLExperimentStatus.model_validate({k: v for k, v in known.items() if k not in bad})


def _container_status(body: dict[str, Any]) -> dict[str, Any]:
    statuses = (body.get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def pod_state(body: dict[str, Any]) -> PodState:
    """What the decision needs from a Pod body (pure; no API calls)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    container = _container_status(body)
    state = container.get("state") or {}
    terminated = state.get("terminated") or (container.get("lastState") or {}).get("terminated") or {}
    waiting = state.get("waiting") or {}
    text = terminated.get("message") or ""
    try:
        summary = json.loads(text) if text.strip().startswith("{") else None
    except ValueError:
        summary = None
    role = (meta.get("labels") or {}).get(ROLE_LABEL, "")
    name = meta.get("name", "")
    index = None
    if role == WORKER_ROLE and name.rsplit("-", 1)[-1].isdigit():
        index = int(name.rsplit("-", 1)[-1])
    try:
        attempt = int((meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION, "0"))
    except ValueError:
        attempt = 0
    containers = (body.get("spec") or {}).get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    gates = {g.get("name") for g in (body.get("spec") or {}).get("schedulingGates") or []}
    disruption = next((c.get("reason") or "DisruptionTarget" for c in status.get("conditions") or []
                       if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    return PodState(
        name=name, role=role, attempt=attempt, index=index,
        phase=status.get("phase") or PodPhase.PENDING,
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=terminated.get("exitCode"),
        termination=cast(TerminationSummary, summary) if isinstance(summary, dict) else None,
        termination_text=text[:1024],
        waiting_reason=waiting.get("reason"), waiting_message=waiting.get("message") or "",
        image=containers[0].get("image", ""), ip=status.get("podIP"),
        termination_reason=terminated.get("reason"),
        memory_limit=str(limits["memory"]) if limits.get("memory") is not None else None,
        gated=KUEUE_GATE in gates, disruption=disruption,
        running_image=container.get("image") or "", image_id=container.get("imageID") or "",
    )


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else key))
    return out


def changed_fields(running_spec: dict[str, Any], desired_spec: dict[str, Any]) -> list[str]:
    """Spec fields (dotted paths) whose values differ between what runs and what is asked."""
    running, desired = _flatten(running_spec), _flatten(desired_spec)
    keys = sorted(set(running) | set(desired))
    return [k for k in keys if running.get(k) != desired.get(k)]


def refused_changes(running_spec: dict[str, Any] | None, desired_spec: dict[str, Any],
                    mutable: tuple[str, ...] = MUTABLE_FIELDS) -> tuple[str, ...]:
    """The changes a running experiment cannot take (all but the `mutable` fields)."""
    if running_spec is None:
        return ()
    fields = changed_fields(running_spec, desired_spec)
    return tuple(f"spec.{f}" for f in fields if not any(f == m or f.startswith(m + ".") for m in mutable))


def with_mutable_fields(running_spec: dict[str, Any], desired_spec: dict[str, Any],
                        mutable: tuple[str, ...] = MUTABLE_FIELDS) -> dict[str, Any]:
    """The running spec with the mutable fields taken from the desired one (what a refused change keeps)."""
    result: dict[str, Any] = json.loads(json.dumps(running_spec))
    for path in mutable:
        parts = path.split(".")
        source: Any = desired_spec
        for part in parts:
            source = source.get(part) if isinstance(source, dict) else None
        target = result
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        if source is None:
            target.pop(parts[-1], None)
        else:
            target[parts[-1]] = source
    return result
