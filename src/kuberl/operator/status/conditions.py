"""Conditions: their types, the reasons the operator gives, and the conditions each phase sets.

Ready, Succeeded, Reconciling and Stalled follow the phase (docs/operator.md#lifecycle); TrackingDegraded
is set apart, while the trainer says MLflow is not logging. Every condition carries observedGeneration;
its lastTransitionTime moves only when its status does.
"""

from __future__ import annotations

import datetime
from enum import StrEnum

from kuberl.api.types import TERMINAL_PHASES, Condition, ConditionStatus, Phase
from kuberl.operator.status.observation import KUBELET_OOM_KILLED, Observation

MAX_MESSAGE = 1024  # status messages and conditions stay small, whatever a trainer or a spec error says


class ConditionType(StrEnum):
    READY = "Ready"
    SUCCEEDED = "Succeeded"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    TRACKING_DEGRADED = "TrackingDegraded"  # spec.tracking.mlflow or .wandb is set and does not answer
    FAILED = "Failed"  # an RLSweep's: True once it ended Failed (its message names the failed trials)


PHASE_CONDITIONS = (ConditionType.READY, ConditionType.SUCCEEDED, ConditionType.RECONCILING, ConditionType.STALLED)


class Reason(StrEnum):
    """The reasons of conditions and events."""

    # a phase that is its own reason
    QUEUED = Phase.QUEUED.value
    SUCCEEDED = Phase.SUCCEEDED.value
    SUSPENDED = Phase.SUSPENDED.value
    # on the way to training
    PODS_PENDING = "PodsPending"
    WAITING_FOR_TRAINER = "WaitingForTrainer"
    WAITING_FOR_WORKERS = "WaitingForWorkers"
    TRAINING = "Training"
    HEAD_CREATED = "HeadCreated"  # event only
    # an attempt ends early
    RESTARTING = "Restarting"
    HEAD_FAILED = "HeadFailed"  # event only
    OOM_KILLED = KUBELET_OOM_KILLED  # the kubelet's own word, passed on
    PREEMPTED = "Preempted"
    WORKER_LOST = "WorkerLost"  # event only
    WORKER_RECREATED = "WorkerRecreated"  # event only
    # the experiment fails, or waits for a change
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    INVALID_SPEC = "InvalidSpec"
    SPEC_FIXED = "SpecFixed"
    SPEC_CHANGE_REFUSED = "SpecChangeRefused"
    SECRET_NOT_FOUND = "SecretNotFound"
    CREATE_REJECTED = "CreateRejected"
    QUOTA_EXCEEDED = "QuotaExceeded"  # a ResourceQuota refused a pod (condition and event)
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    TTL_EXPIRED = "TTLExpired"  # event only
    # TrackingDegraded
    TRACKING_UNAVAILABLE = "TrackingUnavailable"
    TRACKING_LOGGING = "TrackingLogging"


# A Stalled condition that refuses a change while the pods go on running what they run.
REFUSAL_REASONS = frozenset({Reason.SPEC_CHANGE_REFUSED, Reason.INVALID_SPEC})

# phase: the statuses of PHASE_CONDITIONS (Running's Ready and Reconciling follow the workers)
_BY_PHASE: dict[Phase, tuple[ConditionStatus, ConditionStatus, ConditionStatus, ConditionStatus]] = {
    Phase.PENDING: ("False", "Unknown", "True", "False"),
    Phase.QUEUED: ("False", "Unknown", "True", "False"),
    Phase.STARTING: ("False", "Unknown", "True", "False"),
    Phase.SUSPENDED: ("False", "Unknown", "False", "False"),
    Phase.SUCCEEDED: ("False", "True", "False", "False"),
    Phase.FAILED: ("False", "False", "False", "True"),
}


def timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def capped(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def stalled(conditions: list[Condition]) -> Condition | None:
    """The Stalled condition, where it is True (the reason the experiment cannot go on as it is)."""
    return next((c for c in conditions if c.type == ConditionType.STALLED and c.status == "True"), None)


def set_condition(conditions: list[Condition], type_: str, status: ConditionStatus, reason: str, message: str,
                  generation: int, now: datetime.datetime) -> list[Condition]:
    """Upsert one condition; lastTransitionTime moves only when its status changes."""
    old = next((c for c in conditions if c.type == type_), None)
    unchanged_since = old.last_transition_time if old is not None and old.status == status else None
    new = Condition(type=type_, status=status, reason=reason, message=message,
                    last_transition_time=unchanged_since or timestamp(now),
                    observed_generation=generation)
    ordered = [c for c in conditions if c.type != type_] + [new]
    return sorted(ordered, key=lambda c: PHASE_CONDITIONS.index(c.type) if c.type in PHASE_CONDITIONS else 99)


def conditions_for(phase: Phase, reason: str, message: str, ready: bool, obs: Observation) -> list[Condition]:
    """The previous conditions with those of `phase`; a refused spec change sets Stalled whatever the phase."""
    conds = list(obs.previous.conditions)
    g, now = obs.generation, obs.now
    if phase == Phase.RUNNING:
        statuses: tuple[ConditionStatus, ...] = ("True" if ready else "False", "Unknown", "False" if ready else "True",
                                                 "False")
    else:
        statuses = _BY_PHASE[phase]
    for type_, status in zip(PHASE_CONDITIONS, statuses, strict=True):
        said = message if status != "False" or type_ != ConditionType.STALLED else ""
        conds = set_condition(conds, type_, status, reason, said, g, now)
    if obs.invalid_edit and phase not in TERMINAL_PHASES:
        message = ("the spec does not validate, so the pods go on with the spec they started with: "
                   + "; ".join(obs.invalid_edit) + "; fix the manifest and apply it again")
        conds = set_condition(conds, ConditionType.STALLED, "True", Reason.INVALID_SPEC, message, g, now)
    elif obs.refused_changes and phase not in TERMINAL_PHASES:
        message = (f"cannot change {', '.join(obs.refused_changes)} while the experiment runs; "
                   "suspend it first or create a new experiment")
        if obs.kueue and "spec.workers.replicas" in obs.refused_changes:
            message += (" (Kueue admits a pod group of a fixed size: suspend, change spec.workers.replicas "
                        "and resume to queue a group of the new size)")
        conds = set_condition(conds, ConditionType.STALLED, "True", Reason.SPEC_CHANGE_REFUSED, message, g, now)
    return conds
