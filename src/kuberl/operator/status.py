"""Decide: a pure function from what the operator observed to the new `.status` and the actions to take.

`decide(observation)` knows the whole lifecycle (docs/architecture.md, docs/operator.md) (phases, conditions, attempts, the
backoff limit, suspend, TTL, scaling, refused spec changes, fail-fast errors); the handlers only
observe, call it, and apply its `Decision`. Every decision is idempotent: applying it twice, or
deciding again from what a half-applied decision left behind, makes nothing twice.

Head restarts are counted in two passes so that a crash between acting and recording can never
hide a failure: the pass that sees a failed (or lost) head records the failure and deletes the pod;
a later pass, which sees the failure recorded, creates the next attempt.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from kuberl.api.contract import (
    ATTEMPT_ANNOTATION,
    EXIT_INVALID_SPEC,
    HEAD_ROLE,
    PROGRESS_KEYS,
    RESULT_INVALID_SPEC,
    RESULT_SUCCEEDED,
    ROLE_LABEL,
    WORKER_ROLE,
    TerminationSummary,
    TrainerStatus,
)
from kuberl.operator.builders.podgroup import KUEUE_GATE

IMAGE_PULL_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
CONFIG_ERROR_REASONS = {"CreateContainerConfigError"}
CONDITION_TYPES = ("Ready", "Succeeded", "Reconciling", "Stalled")
TRACKING_CONDITION = "TrackingDegraded"  # spec.tracking.mlflow is set and MLflow does not answer
MAX_MESSAGE = 1024  # status messages and conditions stay small, whatever a trainer or a spec error says
TERMINAL_PHASES = ("Succeeded", "Failed")
# Fields a running experiment can change; any other spec change waits for suspend or a new experiment.
MUTABLE_FIELDS = ("workers.replicas", "suspend", "backoffLimit", "ttlSecondsAfterFinished")
QUOTA_EXCEEDED = "QuotaExceeded"  # a ResourceQuota refused a pod (condition and event reason)
# Under Kueue the pod group's size is fixed once queued (pod-group-total-count): a new size needs a new group.
KUEUE_MUTABLE_FIELDS = tuple(f for f in MUTABLE_FIELDS if f != "workers.replicas")
OOM_KILLED = "OOMKilled"  # the kubelet's reason for a container killed at its memory limit
MEMORY_SETTING = {HEAD_ROLE: "spec.head.memory", WORKER_ROLE: "spec.workers.memory"}


@dataclass(frozen=True)
class PodState:
    name: str
    role: str  # head | worker
    attempt: int
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
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


@dataclass(frozen=True)
class Observation:
    generation: int
    now: datetime.datetime
    previous: dict[str, Any]  # the current .status
    spec_errors: tuple[str, ...] = ()
    replicas: int = 0
    backoff_limit: int = 3
    suspend: bool = False
    ttl_seconds: int | None = None
    refused_changes: tuple[str, ...] = ()  # immutable fields changed while pods run
    missing_secret: str | None = None
    create_rejected: str | None = None  # the API server refused a child for good (400/403/422)
    quota_exceeded: str | None = None  # a ResourceQuota refused a pod for now (the API server's message)
    pods: tuple[PodState, ...] = ()
    trainer: TrainerStatus | None = None  # the head's /status JSON, when reachable
    restarts: int = 0  # head failures counted so far (annotation)
    failed_attempt: int = 0  # the highest attempt already counted as failed (annotation)
    kueue: bool = False  # admitted by Kueue as a pod group (the experiment's queue-name label)


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Decision:
    status: dict[str, Any]
    restarts: int
    failed_attempt: int
    create_head: int | None = None  # the attempt to create
    create_workers: list[int] = field(default_factory=list)
    worker_attempt: int = 0
    delete_pods: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    ensure_children: bool = False  # ConfigMap, Service, Secret, NetworkPolicy
    use_running_spec: bool = False  # a refused change: build pods from what already runs
    requeue_after: float | None = None
    quota_wait: bool = False  # a quota refused a pod: nothing was created, the caller backs off

    @property
    def acts(self) -> bool:
        """True when the decision changes the cluster, so a follow-up pass should look again."""
        return bool(self.create_head or self.create_workers or self.delete_pods)


# --- observing ------------------------------------------------------------------------------------------


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
        phase=status.get("phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=terminated.get("exitCode"),
        termination=summary if isinstance(summary, dict) else None,
        termination_text=text[:1024],
        waiting_reason=waiting.get("reason"), waiting_message=waiting.get("message") or "",
        image=containers[0].get("image", ""), ip=status.get("podIP"),
        termination_reason=terminated.get("reason"),
        memory_limit=str(limits["memory"]) if limits.get("memory") is not None else None,
        gated=KUEUE_GATE in gates, disruption=disruption,
    )


def out_of_memory(pod: PodState) -> str:
    """What to tell a user whose pod was OOMKilled: the pod, its limit, and the setting to raise."""
    limit = f"its memory limit {pod.memory_limit}" if pod.memory_limit else "no memory limit"
    setting = MEMORY_SETTING.get(pod.role, "the pod's memory")
    return f"pod {pod.name} ran out of memory (OOMKilled at {limit}); raise {setting}"


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
    result = json.loads(json.dumps(running_spec))
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


# --- conditions -----------------------------------------------------------------------------------------


def _timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: list[dict[str, Any]], type_: str, status: str, reason: str, message: str,
                  generation: int, now: datetime.datetime) -> list[dict[str, Any]]:
    """Upsert one condition; lastTransitionTime moves only when its status changes."""
    old = next((c for c in conditions if c.get("type") == type_), None)
    changed = old is None or old.get("status") != status
    new = {"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": _timestamp(now) if changed else old.get("lastTransitionTime") or _timestamp(now),
           "observedGeneration": generation}
    rest = [c for c in conditions if c.get("type") != type_]
    ordered = rest + [new]
    return sorted(ordered, key=lambda c: CONDITION_TYPES.index(c["type"]) if c["type"] in CONDITION_TYPES else 99)


def _conditions_for(phase: str, reason: str, message: str, ready: bool,
                    obs: Observation) -> list[dict[str, Any]]:
    conds = list(obs.previous.get("conditions") or [])
    g, now = obs.generation, obs.now
    table = {
        # phase: (Ready, Succeeded, Reconciling, Stalled)
        "Pending": ("False", "Unknown", "True", "False"),
        "Queued": ("False", "Unknown", "True", "False"),
        "Starting": ("False", "Unknown", "True", "False"),
        "Running": ("True" if ready else "False", "Unknown", "False" if ready else "True", "False"),
        "Suspended": ("False", "Unknown", "False", "False"),
        "Succeeded": ("False", "True", "False", "False"),
        "Failed": ("False", "False", "False", "True"),
    }
    for type_, status in zip(CONDITION_TYPES, table[phase], strict=True):
        conds = set_condition(conds, type_, status, reason, message if status != "False" or type_ != "Stalled"
                              else "", g, now)
    if obs.refused_changes and phase not in TERMINAL_PHASES:
        message = (f"cannot change {', '.join(obs.refused_changes)} while the experiment runs; "
                   "suspend it first or create a new experiment")
        if obs.kueue and "spec.workers.replicas" in obs.refused_changes:
            message += (" (Kueue admits a pod group of a fixed size: suspend, change spec.workers.replicas "
                        "and resume to queue a group of the new size)")
        conds = set_condition(conds, "Stalled", "True", "SpecChangeRefused", message, g, now)
    return conds


# --- deciding -------------------------------------------------------------------------------------------


def _head(obs: Observation) -> PodState | None:
    return next((p for p in obs.pods if p.role == HEAD_ROLE and not p.deleting), None)


def _workers(obs: Observation) -> list[PodState]:
    return [p for p in obs.pods if p.role == WORKER_ROLE and not p.deleting]


def _base(obs: Observation) -> Decision:
    prev = obs.previous
    head = _head(obs)
    attempt = max(int(prev.get("attempt") or 0), head.attempt if head else 0)
    status = {k: v for k, v in prev.items() if k != "conditions"}
    status["attempt"] = attempt or None
    status["observedGeneration"] = obs.generation
    return Decision(status=status, restarts=obs.restarts, failed_attempt=obs.failed_attempt)


def _finish(decision: Decision, obs: Observation, phase: str, reason: str, message: str,
            ready: bool = False, announce: bool = True) -> Decision:
    """Set the phase and conditions; `announce`: an Event for a phase change (unless another event
    of the decision already says it)."""
    prev_phase = obs.previous.get("phase")
    status = decision.status
    message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
    status["phase"] = phase
    status["message"] = message
    status["conditions"] = _conditions_for(phase, reason, message, ready, obs)
    if phase in TERMINAL_PHASES and not status.get("completionTime"):
        status["completionTime"] = _timestamp(obs.now)
    if phase != prev_phase and announce:
        kind = "Warning" if phase == "Failed" else "Normal"
        decision.events.insert(0, Event(kind, reason, f"{phase}: {message}" if message else phase))
    prev_refused = next((c for c in obs.previous.get("conditions") or []
                         if c.get("type") == "Stalled" and c.get("reason") == "SpecChangeRefused"), None)
    now_refused = next((c for c in status["conditions"]
                        if c["type"] == "Stalled" and c["reason"] == "SpecChangeRefused"), None)
    if now_refused and (prev_refused is None or prev_refused.get("message") != now_refused["message"]):
        decision.events.append(Event("Warning", "SpecChangeRefused", now_refused["message"]))
    status.update(workers=status.get("workers") or 0)
    return decision


def _fail(decision: Decision, obs: Observation, reason: str, message: str, *, keep_head: bool = False) -> Decision:
    head = _head(obs)
    decision.delete_pods = [p.name for p in obs.pods if not p.deleting and not (keep_head and p is head)]
    decision.status["workers"] = 0
    return _finish(decision, obs, "Failed", reason, message)


def _wait_for_quota(decision: Decision, obs: Observation) -> Decision:
    """A ResourceQuota refused a pod: create nothing, say why (a condition with the quota's message,
    one Warning event when the wait begins) and let the caller back off; a later pass creates the pod
    once the quota allows it."""
    prev_phase = obs.previous.get("phase")
    phase = prev_phase if prev_phase in ("Starting", "Running") else "Pending"
    message = obs.quota_exceeded or ""
    decision.quota_wait = True
    already = any(c.get("reason") == QUOTA_EXCEEDED for c in obs.previous.get("conditions") or [])
    if not already:
        decision.events.append(Event("Warning", QUOTA_EXCEEDED, f"{phase}: {message}"))
    return _finish(decision, obs, phase, QUOTA_EXCEEDED, message, announce=False)


def _terminal(decision: Decision, obs: Observation) -> Decision:
    """A finished experiment stays finished; its pods go after ttlSecondsAfterFinished."""
    prev = obs.previous
    decision.status["conditions"] = list(prev.get("conditions") or [])
    for cond in decision.status["conditions"]:
        cond["observedGeneration"] = obs.generation
    decision.delete_pods = [p.name for p in _workers(obs)]
    completion = prev.get("completionTime")
    if obs.ttl_seconds is not None and completion:
        finished = datetime.datetime.strptime(completion, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
        left = (finished + datetime.timedelta(seconds=obs.ttl_seconds) - obs.now).total_seconds()
        if left <= 0:
            decision.delete_pods = [p.name for p in obs.pods if not p.deleting]
            if any(p.role == HEAD_ROLE and not p.deleting for p in obs.pods):
                decision.events.append(Event("Normal", "TTLExpired", "pods deleted after ttlSecondsAfterFinished"))
        else:
            decision.requeue_after = left
    decision.status["workers"] = 0
    return decision


def _summary_from(head: PodState, status: dict[str, Any]) -> str:
    summary = head.termination or {}
    for key in PROGRESS_KEYS:
        if summary.get(key) is not None:
            status[key] = summary[key]
    return str(summary.get("message") or summary.get("reason") or head.termination_text or "")


def decide(obs: Observation) -> Decision:
    decision = _base(obs)
    prev_phase = obs.previous.get("phase")
    prev_reason = next((c.get("reason") for c in obs.previous.get("conditions") or []
                        if c.get("type") == "Stalled" and c.get("status") == "True"), None)
    fixed_invalid_spec = prev_phase == "Failed" and prev_reason == "InvalidSpec" and not obs.spec_errors \
        and obs.generation > int(obs.previous.get("observedGeneration") or 0)

    if obs.spec_errors:
        return _fail(decision, obs, "InvalidSpec", "; ".join(obs.spec_errors))
    if prev_phase in TERMINAL_PHASES and not fixed_invalid_spec:
        return _terminal(decision, obs)
    if fixed_invalid_spec:
        # A fixed spec starts afresh: the refused attempt is closed without counting as a restart.
        decision.status.pop("completionTime", None)
        decision.failed_attempt = max(obs.failed_attempt, int(decision.status.get("attempt") or 0))
        live = [p.name for p in obs.pods if not p.deleting]
        if live:
            decision.delete_pods = live
            decision.requeue_after = 1.0
            return _finish(decision, obs, "Pending", "SpecFixed", "removing the pods of the refused spec")
    if obs.missing_secret:
        return _fail(decision, obs, "SecretNotFound", obs.missing_secret)
    if obs.create_rejected:
        return _fail(decision, obs, "CreateRejected", obs.create_rejected)
    if obs.quota_exceeded:
        return _wait_for_quota(decision, obs)
    for pod in obs.pods:
        if pod.waiting_reason in IMAGE_PULL_REASONS:
            return _fail(decision, obs, "ImagePullFailed",
                         f"image {pod.image!r} cannot be pulled ({pod.waiting_reason}): {pod.waiting_message}".strip())
        if pod.waiting_reason in CONFIG_ERROR_REASONS:
            return _fail(decision, obs, "ContainerConfigError", f"pod {pod.name}: {pod.waiting_message}")

    decision.ensure_children = True
    decision.use_running_spec = bool(obs.refused_changes)
    if obs.suspend:
        decision.delete_pods = [p.name for p in obs.pods if not p.deleting]
        decision.status["workers"] = 0
        return _finish(decision, obs, "Suspended", "Suspended", "pods deleted; storage kept")
    return _lifecycle(decision, obs)


def _lifecycle(decision: Decision, obs: Observation) -> Decision:
    head = _head(obs)
    attempt = int(decision.status.get("attempt") or 0)
    prev_phase = obs.previous.get("phase")
    status = decision.status

    preempted = next((p for p in obs.pods if p.role == HEAD_ROLE and p.attempt == attempt and p.disruption), None)
    if preempted is not None and attempt > obs.failed_attempt:
        return _head_preempted(decision, obs, attempt, preempted)
    if head is None:
        if any(p.role == HEAD_ROLE for p in obs.pods):  # the old head is still going away
            decision.requeue_after = 1.0
            return _finish(decision, obs, "Starting", "Restarting", "waiting for the old head pod to go")
        lost = attempt > obs.failed_attempt and prev_phase in ("Pending", "Starting", "Running")
        if lost:
            return _head_failed(decision, obs, attempt, "the head pod was lost")
        next_attempt = attempt + 1
        decision.create_head = next_attempt
        status["attempt"] = next_attempt
        status["startTime"] = status.get("startTime") or _timestamp(obs.now)
        decision.delete_pods = [p.name for p in _workers(obs)]  # workers join the new head afresh
        decision.worker_attempt = next_attempt
        decision.create_workers = [] if decision.delete_pods else list(range(obs.replicas))
        if decision.delete_pods:
            decision.requeue_after = 1.0
        status["workers"] = 0
        message = f"attempt {next_attempt}" + (" resumes from the last checkpoint" if next_attempt > 1 else "")
        decision.events.append(Event("Normal", "HeadCreated", f"{message}; pods pending"))
        return _finish(decision, obs, "Pending", "PodsPending", _with_failure(message, obs, next_attempt),
                       announce=False)

    if head.phase == "Succeeded" and (head.termination or {}).get("result") != RESULT_SUCCEEDED:
        # The trainer always leaves its summary; an exit 0 without one is not a finished run
        # (user code calling os._exit(0), say): a failure, retried up to backoffLimit.
        return _head_failed(decision, obs, attempt, "the trainer exited 0 without its summary", head)
    if head.phase == "Succeeded":
        message = _summary_from(head, status)
        decision.delete_pods = [p.name for p in _workers(obs)]
        status["workers"] = 0
        return _finish(decision, obs, "Succeeded", "Succeeded", message or "stop criterion met")
    if head.phase == "Failed":
        summary = head.termination or {}
        if head.exit_code == EXIT_INVALID_SPEC or summary.get("result") == RESULT_INVALID_SPEC:
            message = str(summary.get("message") or head.termination_text or "the trainer refused the spec")
            return _fail(decision, obs, "InvalidSpec", message, keep_head=True)
        if head.termination_reason == OOM_KILLED:
            return _head_failed(decision, obs, head.attempt, out_of_memory(head), head, reason=OOM_KILLED)
        detail = str(summary.get("message") or summary.get("reason") or head.termination_text or "").strip()
        reason = f"exit code {head.exit_code}" if head.exit_code is not None else "failed"
        return _head_failed(decision, obs, head.attempt, f"{reason}: {detail}" if detail else reason, head)

    created = list(decision.create_workers)
    oom = _workers_actions(decision, obs, attempt)
    if decision.create_workers and not created and prev_phase == "Running":
        decision.events.append(Event("Warning", "WorkerRecreated",
                                     f"creating worker pods {decision.create_workers} for attempt {attempt}"))
    if oom:  # says why a worker is gone until the next pass; the Warning event stays
        phase = "Running" if prev_phase == "Running" else "Pending"
        return _finish(decision, obs, phase, OOM_KILLED, f"attempt {attempt}: " + "; ".join(oom))
    if head.phase == "Pending" and any(p.gated for p in obs.pods if not p.deleting and p.attempt == attempt):
        return _finish(decision, obs, "Queued", "Queued",
                       f"attempt {attempt}: the pod group waits for admission by Kueue ({KUEUE_GATE} gate)")
    if head.phase != "Running":
        return _finish(decision, obs, "Pending", "PodsPending",
                       _with_failure(f"attempt {attempt}: head pod {head.phase}", obs, attempt))
    trainer = obs.trainer or {}
    trainer_here = bool(trainer) and int(trainer.get("attempt") or attempt) == attempt
    if trainer_here:
        for key in PROGRESS_KEYS:
            if trainer.get(key) is not None:
                status[key] = trainer[key]
    if not (trainer_here and trainer.get("phase") == "Running") and prev_phase != "Running":
        return _finish(decision, obs, "Starting", "WaitingForTrainer",
                       _with_failure(f"attempt {attempt}: head running, waiting for the trainer", obs, attempt))
    ready = status["workers"] >= obs.replicas
    reason = "Training" if ready else "WaitingForWorkers"
    message = f"attempt {attempt}: {status['workers']}/{obs.replicas} workers ready"
    _finish(decision, obs, "Running", reason, message, ready=ready)
    if trainer_here:
        _tracking_condition(decision, obs, trainer.get("trackingProblem"))
    return decision


def _tracking_condition(decision: Decision, obs: Observation, problem: str | None) -> None:
    """TrackingDegraded: MLflow (spec.tracking) is not logging. Training goes on; the condition and a
    Warning event say why, and the condition turns False once the trainer logs again."""
    previous = next((c for c in obs.previous.get("conditions") or [] if c.get("type") == TRACKING_CONDITION), None)
    if not problem and previous is None:
        return
    status, reason = ("True", "TrackingUnavailable") if problem else ("False", "TrackingLogging")
    message = str(problem or "")[:MAX_MESSAGE]
    decision.status["conditions"] = set_condition(decision.status["conditions"], TRACKING_CONDITION, status, reason,
                                                  message, obs.generation, obs.now)
    if problem and (previous is None or previous.get("status") != "True"):
        decision.events.append(Event("Warning", "TrackingUnavailable", f"training goes on without MLflow: {message}"))


def _with_failure(message: str, obs: Observation, attempt: int) -> str:
    """`message` plus why the previous attempt ended (from the previous status message), until this
    attempt trains: a head that crashes in a loop says why in every pass, not only in events."""
    previous = str(obs.previous.get("message") or "")
    start = previous.find(f"attempt {attempt - 1} failed")
    if attempt < 2 or start < 0:
        return message
    failure = previous[start:-1] if start > 0 and previous.endswith(")") else previous[start:]
    return f"{message} ({failure})"


def _head_failed(decision: Decision, obs: Observation, attempt: int, why: str,
                 head: PodState | None = None, reason: str | None = None) -> Decision:
    """Record a head failure once per attempt; retry in a later pass, or fail past backoffLimit.
    A known `reason` (OOMKilled) names the conditions, the event and the final failure."""
    if attempt > obs.failed_attempt:
        decision.restarts = obs.restarts + 1
        decision.failed_attempt = attempt
    if decision.restarts > obs.backoff_limit:
        return _fail(decision, obs, reason or "BackoffLimitExceeded",
                     f"attempt {attempt} failed ({why}); backoffLimit {obs.backoff_limit} reached", keep_head=True)
    if head is not None:
        decision.delete_pods = [head.name]
    decision.requeue_after = 0.5
    if attempt > obs.failed_attempt:
        decision.events.append(Event("Warning", reason or "HeadFailed",
                                     f"attempt {attempt} failed ({why}); restart {decision.restarts} of "
                                     f"{obs.backoff_limit} resumes from the last checkpoint"))
    # A named reason has said it in its Warning event: no second event for the phase change.
    return _finish(decision, obs, "Starting", reason or "Restarting", f"attempt {attempt} failed: {why}",
                   announce=reason is None)


def _head_preempted(decision: Decision, obs: Observation, attempt: int, head: PodState) -> Decision:
    """The cluster took the head away (Kueue preemption, eviction, a node drain: a DisruptionTarget
    condition): the attempt closes without counting against backoffLimit and the next one resumes from
    the last checkpoint."""
    decision.failed_attempt = attempt
    decision.delete_pods = [p.name for p in obs.pods if not p.deleting]
    decision.requeue_after = 0.5
    decision.status["workers"] = 0
    message = (f"attempt {attempt} preempted ({head.disruption}); the next attempt resumes from the last "
               "checkpoint, not counted against backoffLimit")
    decision.events.append(Event("Warning", "Preempted", message))
    return _finish(decision, obs, "Pending", "Preempted", message, announce=False)


def _workers_actions(decision: Decision, obs: Observation, attempt: int) -> list[str]:
    """Delete, recreate and count the workers; what to say about those that ran out of memory."""
    ready = 0
    oom: list[str] = []
    present: set[int] = set()
    for pod in _workers(obs):
        if pod.index is None or pod.index >= obs.replicas or pod.attempt != attempt:
            decision.delete_pods.append(pod.name)  # scaled down, or left from an older attempt
            continue
        if pod.phase in ("Failed", "Succeeded", "Unknown"):
            decision.delete_pods.append(pod.name)
            if pod.termination_reason == OOM_KILLED:
                oom.append(out_of_memory(pod))
                decision.events.append(Event("Warning", OOM_KILLED, f"{oom[-1]}; recreating it"))
            else:
                decision.events.append(Event("Warning", "WorkerLost",
                                             f"{pod.name} {pod.phase.lower()}; recreating it"))
            decision.requeue_after = 0.5
            present.add(pod.index)  # recreated in the next pass, once the old pod is gone
            continue
        present.add(pod.index)
        ready += pod.phase == "Running"
    gone = {p.index for p in obs.pods if p.role == WORKER_ROLE and p.deleting and p.index is not None}
    missing = [i for i in range(obs.replicas) if i not in present and i not in gone]
    if missing:
        decision.create_workers = missing
        decision.worker_attempt = attempt
    elif gone & set(range(obs.replicas)):
        decision.requeue_after = 1.0
    decision.status["workers"] = ready
    return oom
