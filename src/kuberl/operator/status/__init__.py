"""Status, as pure functions: observe (API objects -> `Observation`), conditions, and decide
(`Observation` -> `Decision`: the new typed `.status` and the actions to take). reconcile.py reads the
API, calls `decide` and applies the decision."""

from kuberl.operator.status.conditions import ConditionType, Reason, set_condition, stalled
from kuberl.operator.status.decision import Decision, Event, decide, out_of_memory
from kuberl.operator.status.observation import (
    KUEUE_MUTABLE_FIELDS,
    MUTABLE_FIELDS,
    Observation,
    PodPhase,
    PodState,
    changed_fields,
    pod_state,
    refused_changes,
    status_of,
    with_mutable_fields,
)

__all__ = [
    "KUEUE_MUTABLE_FIELDS",
    "MUTABLE_FIELDS",
    "ConditionType",
    "Decision",
    "Event",
    "Observation",
    "PodPhase",
    "PodState",
    "Reason",
    "changed_fields",
    "decide",
    "out_of_memory",
    "pod_state",
    "refused_changes",
    "set_condition",
    "stalled",
    "status_of",
    "with_mutable_fields",
]
