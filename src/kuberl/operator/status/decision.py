"""Decide: a pure function from what the operator observed to the new `.status` and the actions to take.

`decide(observation)` knows the whole lifecycle (docs/architecture.md, docs/operator.md) (phases, conditions,
attempts, the backoff limit, suspend, TTL, scaling, refused spec changes, fail-fast errors); the handlers
only observe, call it, and apply its `Decision`. Every decision is idempotent: applying it twice, or
deciding again from what a half-applied decision left behind, makes nothing twice.

Head restarts are counted in two passes so that a crash between acting and recording can never
hide a failure: the pass that sees a failed (or lost) head records the failure and deletes the pod;
a later pass, which sees the failure recorded, creates the next attempt.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kuberl.api.contract import (
    EXIT_INVALID_SPEC,
    HEAD_ROLE,
    PROGRESS_KEYS,
    RESULT_INVALID_SPEC,
    RESULT_SUCCEEDED,
    WORKER_ROLE,
)
from kuberl.api.types import TERMINAL_PHASES, Condition, ConditionStatus, Failure, Phase, RLExperimentStatus
from kuberl.operator.builders.podgroup import KUEUE_GATE
from kuberl.operator.status.conditions import (
    MAX_MESSAGE,
    REFUSAL_REASONS,
    ConditionType,
    Reason,
    capped,
    conditions_for,
    set_condition,
    stalled,
    timestamp,
)
from kuberl.operator.status.observation import (
    CONFIG_ERROR_REASONS,
    IMAGE_PULL_REASONS,
    Observation,
    PodPhase,
    PodState,
)

MEMORY_SETTING = {HEAD_ROLE: "spec.head.memory", WORKER_ROLE: "spec.workers.memory"}
# Failures of a spec (or of what it names) before it trained: a new generation of the spec starts it afresh.
SPEC_FAILURES = frozenset({Reason.INVALID_SPEC, Reason.SECRET_NOT_FOUND, Reason.CREATE_REJECTED,
                           Reason.IMAGE_PULL_FAILED, Reason.CONTAINER_CONFIG_ERROR})
# Pull errors that no retry cures, whether or not the image was pulled before.
PERMANENT_PULL_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
# The status field of each progress key (the trainer's camelCase names are the status's; a KeyError here
# is a progress key that the status lacks).
_PROGRESS_FIELDS = {key: {f.alias: name for name, f in RLExperimentStatus.model_fields.items()}[key]
                    for key in PROGRESS_KEYS}


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Decision:
    status: RLExperimentStatus
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


def out_of_memory(pod: PodState) -> str:
    """What to tell a user whose pod was OOMKilled: the pod, its limit, and the setting to raise."""
    limit = f"its memory limit {pod.memory_limit}" if pod.memory_limit else "no memory limit"
    setting = MEMORY_SETTING.get(pod.role, "the pod's memory")
    return f"pod {pod.name} ran out of memory (OOMKilled at {limit}); raise {setting}"


def _head(obs: Observation) -> PodState | None:
    return next((p for p in obs.pods if p.role == HEAD_ROLE and not p.deleting), None)


def _workers(obs: Observation) -> list[PodState]:
    return [p for p in obs.pods if p.role == WORKER_ROLE and not p.deleting]


def _base(obs: Observation) -> Decision:
    head = _head(obs)
    status = obs.previous.model_copy(deep=True)
    status.conditions = []
    status.attempt = max(obs.previous.attempt or 0, head.attempt if head else 0) or None
    status.observed_generation = obs.generation
    if head is not None and head.image_id:  # what the kubelet ran: the run record's image digest
        status.image, status.image_id = head.running_image or head.image, head.image_id
    return Decision(status=status, restarts=obs.restarts, failed_attempt=obs.failed_attempt)


def _copy_progress(status: RLExperimentStatus, source: Mapping[str, Any]) -> None:
    """The trainer's progress keys into the status. The head pod runs user code, so a value of the wrong
    type is skipped rather than allowed to stop every reconcile."""
    for key, name in _PROGRESS_FIELDS.items():
        if source.get(key) is not None:
            with contextlib.suppress(ValidationError):
                setattr(status, name, source[key])


def _finish(decision: Decision, obs: Observation, phase: Phase, reason: str, message: str,
            ready: bool = False, announce: bool = True) -> Decision:
    """Set the phase and conditions; `announce`: an Event for a phase change (unless another event
    of the decision already says it)."""
    status = decision.status
    message = capped(message)
    status.phase = phase
    status.message = message
    status.conditions = conditions_for(phase, reason, message, ready, obs)
    if phase in TERMINAL_PHASES and not status.completion_time:
        status.completion_time = timestamp(obs.now)
        if obs.ttl_seconds is not None and decision.requeue_after is None:
            decision.requeue_after = float(obs.ttl_seconds)  # the pass that deletes the pods
    if phase != obs.previous.phase and announce:
        kind = "Warning" if phase == Phase.FAILED else "Normal"
        decision.events.insert(0, Event(kind, reason, f"{phase}: {message}" if message else str(phase)))
    if phase not in TERMINAL_PHASES:  # a refused change or edit: one Warning while its message stays the same
        prev_refused, now_refused = _refusal(obs.previous.conditions), _refusal(status.conditions)
        if now_refused and (prev_refused is None or prev_refused.message != now_refused.message):
            decision.events.append(Event("Warning", now_refused.reason, now_refused.message))
    status.workers = status.workers or 0
    return decision


def _fail(decision: Decision, obs: Observation, reason: str, message: str, *, keep_head: bool = False) -> Decision:
    head = _head(obs)
    decision.delete_pods = [p.name for p in obs.pods if not p.deleting and not (keep_head and p is head)]
    decision.status.workers = 0
    return _finish(decision, obs, Phase.FAILED, reason, message)


def _refusal(conditions: list[Condition]) -> Condition | None:
    """A True Stalled condition that refuses a change while the pods go on running what they run."""
    condition = stalled(conditions)
    return condition if condition is not None and condition.reason in REFUSAL_REASONS else None


def _wait_for_quota(decision: Decision, obs: Observation) -> Decision:
    """A ResourceQuota refused a pod: create nothing, say why (a condition with the quota's message,
    one Warning event when the wait begins) and let the caller back off; a later pass creates the pod
    once the quota allows it."""
    decision.quota_wait = True
    return _wait(decision, obs, Reason.QUOTA_EXCEEDED, obs.quota_exceeded or "")


def _wait(decision: Decision, obs: Observation, reason: str, message: str) -> Decision:
    """Create no pod for now, saying why: the phase stays where pods already run (else Pending), and one
    Warning event says it when the wait begins."""
    prev_phase = obs.previous.phase
    phase = prev_phase if prev_phase in (Phase.STARTING, Phase.RUNNING) else Phase.PENDING
    if not any(c.reason == reason for c in obs.previous.conditions):
        decision.events.append(Event("Warning", reason, f"{phase}: {message}"))
    return _finish(decision, obs, phase, reason, message, announce=False)


def _terminal(decision: Decision, obs: Observation) -> Decision:
    """A finished experiment stays finished; its pods go after ttlSecondsAfterFinished."""
    decision.status.conditions = [c.model_copy(update={"observed_generation": obs.generation})
                                  for c in obs.previous.conditions]
    decision.delete_pods = [p.name for p in _workers(obs)]
    completion = obs.previous.completion_time
    if obs.ttl_seconds is not None and completion:
        finished = datetime.datetime.strptime(completion, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
        left = (finished + datetime.timedelta(seconds=obs.ttl_seconds) - obs.now).total_seconds()
        if left <= 0:
            decision.delete_pods = [p.name for p in obs.pods if not p.deleting]
            if any(p.role == HEAD_ROLE and not p.deleting for p in obs.pods):
                decision.events.append(Event("Normal", Reason.TTL_EXPIRED,
                                             "pods deleted after ttlSecondsAfterFinished"))
        else:
            decision.requeue_after = left
    decision.status.workers = 0
    return decision


def _summary_from(head: PodState, status: RLExperimentStatus) -> str:
    summary = head.termination or {}
    _copy_progress(status, summary)
    return str(summary.get("message") or summary.get("reason") or head.termination_text or "")


def decide(obs: Observation) -> Decision:
    decision = _base(obs)
    previous = obs.previous
    prev_stalled = stalled(previous.conditions)
    spec_failure = previous.phase == Phase.FAILED and prev_stalled is not None and prev_stalled.reason in SPEC_FAILURES
    fixed_spec = spec_failure and not obs.spec_errors and obs.generation > (previous.observed_generation or 0)

    if obs.spec_errors and (previous.phase not in TERMINAL_PHASES or spec_failure):
        return _fail(decision, obs, Reason.INVALID_SPEC, "; ".join(obs.spec_errors))
    if previous.phase in TERMINAL_PHASES and not fixed_spec:
        return _terminal(decision, obs)
    if fixed_spec:
        # A fixed spec starts afresh: the refused attempt is closed without counting as a restart.
        decision.status.completion_time = None
        decision.failed_attempt = max(obs.failed_attempt, decision.status.attempt or 0)
        live = [p.name for p in obs.pods if not p.deleting]
        if live:
            decision.delete_pods = live
            decision.requeue_after = 1.0
            return _finish(decision, obs, Phase.PENDING, Reason.SPEC_FIXED, "removing the pods of the refused spec")
    started = bool(decision.status.attempt)
    if obs.missing_secret and not started:  # a Secret it never had: the user's to create
        return _fail(decision, obs, Reason.SECRET_NOT_FOUND, obs.missing_secret)
    if obs.create_rejected:
        return _fail(decision, obs, Reason.CREATE_REJECTED, obs.create_rejected)
    if obs.quota_exceeded:
        return _wait_for_quota(decision, obs)
    for pod in obs.pods:
        if pod.waiting_reason in IMAGE_PULL_REASONS and not _pull_retried(pod, previous):
            return _fail(decision, obs, Reason.IMAGE_PULL_FAILED,
                         f"image {pod.image!r} cannot be pulled ({pod.waiting_reason}): {pod.waiting_message}".strip())
        if pod.waiting_reason in CONFIG_ERROR_REASONS and not obs.missing_secret:
            return _fail(decision, obs, Reason.CONTAINER_CONFIG_ERROR, f"pod {pod.name}: {pod.waiting_message}")

    decision.ensure_children = True
    decision.use_running_spec = bool(obs.refused_changes or obs.invalid_edit)
    if obs.suspend:
        decision.delete_pods = [p.name for p in obs.pods if not p.deleting]
        decision.failed_attempt = max(obs.failed_attempt, decision.status.attempt or 0)  # closed, not failed
        decision.status.workers = 0
        return _finish(decision, obs, Phase.SUSPENDED, Reason.SUSPENDED, "pods deleted; storage kept")
    lifecycle = _lifecycle(decision, obs)
    if obs.missing_secret and (lifecycle.create_head or lifecycle.create_workers):
        return _wait_for_secret(lifecycle, obs)
    return lifecycle


def _image_name(image: str) -> str:
    """An image reference as a container runtime reports it: the Docker Hub host and `library/` written out, and
    `:latest` where it names no tag or digest."""
    name = image.strip()
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = "docker.io/" + (name if "/" in name else "library/" + name)
    last = name.rsplit("/", 1)[-1]
    return name if "@" in last or ":" in last else name + ":latest"


def _pull_retried(pod: PodState, previous: RLExperimentStatus) -> bool:
    """A pull error worth waiting out: the kubelet keeps retrying an image this experiment has already run (a
    registry's rate limit or outage while a pod is recreated), while a first pull that fails is taken for a wrong
    image or an image never loaded, and fails fast."""
    if pod.waiting_reason in PERMANENT_PULL_REASONS or not (previous.image_id and previous.image and pod.image):
        return False
    return _image_name(pod.image) == _image_name(previous.image)


def _wait_for_secret(lifecycle: Decision, obs: Observation) -> Decision:
    """The Secret a started experiment names is gone (rotated, re-created): the pods that run go on (the kubelet
    read it when they started), new ones wait for it. The lifecycle's deletions and recorded failures stand."""
    decision = _base(obs)
    decision.restarts, decision.failed_attempt = lifecycle.restarts, lifecycle.failed_attempt
    decision.status.last_failure = lifecycle.status.last_failure
    decision.status.workers = lifecycle.status.workers
    decision.delete_pods = lifecycle.delete_pods
    decision.ensure_children, decision.use_running_spec = True, lifecycle.use_running_spec
    return _wait(decision, obs, Reason.SECRET_NOT_FOUND,
                 f"{obs.missing_secret}; new pods wait for it, the running ones go on")


def _lifecycle(decision: Decision, obs: Observation) -> Decision:
    head = _head(obs)
    status = decision.status
    attempt = status.attempt or 0
    prev_phase = obs.previous.phase

    preempted = next((p for p in obs.pods if p.role == HEAD_ROLE and p.attempt == attempt and p.disruption), None)
    if preempted is not None and attempt > obs.failed_attempt:
        return _head_preempted(decision, obs, attempt, preempted)
    if head is None:
        if any(p.role == HEAD_ROLE for p in obs.pods):  # the old head is still going away
            decision.requeue_after = 1.0
            return _finish(decision, obs, Phase.STARTING, Reason.RESTARTING, "waiting for the old head pod to go")
        lost = attempt > obs.failed_attempt and prev_phase in (Phase.PENDING, Phase.STARTING, Phase.RUNNING)
        if lost:
            return _head_failed(decision, obs, attempt, "the head pod was lost")
        next_attempt = attempt + 1
        decision.create_head = next_attempt
        status.attempt = next_attempt
        status.start_time = status.start_time or timestamp(obs.now)
        decision.delete_pods = [p.name for p in _workers(obs)]  # workers join the new head afresh
        decision.worker_attempt = next_attempt
        decision.create_workers = [] if decision.delete_pods else list(range(obs.replicas))
        if decision.delete_pods:
            decision.requeue_after = 1.0
        status.workers = 0
        message = f"attempt {next_attempt}" + (" resumes from the last checkpoint" if next_attempt > 1 else "")
        decision.events.append(Event("Normal", Reason.HEAD_CREATED, f"{message}; pods pending"))
        return _finish(decision, obs, Phase.PENDING, Reason.PODS_PENDING,
                       _with_failure(message, status, next_attempt), announce=False)

    if head.phase == PodPhase.SUCCEEDED and (head.termination or {}).get("result") != RESULT_SUCCEEDED:
        # The trainer always leaves its summary; an exit 0 without one is not a finished run
        # (user code calling os._exit(0), say): a failure, retried up to backoffLimit.
        return _head_failed(decision, obs, attempt, "the trainer exited 0 without its summary", head)
    if head.phase == PodPhase.SUCCEEDED:
        message = _summary_from(head, status)
        decision.delete_pods = [p.name for p in _workers(obs)]
        status.workers = 0
        return _finish(decision, obs, Phase.SUCCEEDED, Reason.SUCCEEDED, message or "stop criterion met")
    if head.phase == PodPhase.FAILED:
        summary = head.termination or {}
        if head.exit_code == EXIT_INVALID_SPEC or summary.get("result") == RESULT_INVALID_SPEC:
            message = str(summary.get("message") or head.termination_text or "the trainer refused the spec")
            return _fail(decision, obs, Reason.INVALID_SPEC, message, keep_head=True)
        if head.oom_killed:
            return _head_failed(decision, obs, head.attempt, out_of_memory(head), head, reason=Reason.OOM_KILLED)
        detail = str(summary.get("message") or summary.get("reason") or head.termination_text or "").strip()
        reason = f"exit code {head.exit_code}" if head.exit_code is not None else "failed"
        return _head_failed(decision, obs, head.attempt, f"{reason}: {detail}" if detail else reason, head)

    created = list(decision.create_workers)
    oom = _workers_actions(decision, obs, attempt)
    if decision.create_workers and not created and prev_phase == Phase.RUNNING:
        decision.events.append(Event("Warning", Reason.WORKER_RECREATED,
                                     f"creating worker pods {decision.create_workers} for attempt {attempt}"))
    if oom:  # says why a worker is gone until the next pass; the Warning event stays
        phase = Phase.RUNNING if prev_phase == Phase.RUNNING else Phase.PENDING
        return _finish(decision, obs, phase, Reason.OOM_KILLED, f"attempt {attempt}: " + "; ".join(oom))
    if head.phase == PodPhase.PENDING and any(p.gated for p in obs.pods if not p.deleting and p.attempt == attempt):
        return _finish(decision, obs, Phase.QUEUED, Reason.QUEUED,
                       f"attempt {attempt}: the pod group waits for admission by Kueue ({KUEUE_GATE} gate)")
    if head.phase != PodPhase.RUNNING:
        why = ": ".join(part for part in (head.waiting_reason, head.waiting_message) if part)
        waiting = f" ({why})" if why else ""
        return _finish(decision, obs, Phase.PENDING, Reason.PODS_PENDING,
                       _with_failure(f"attempt {attempt}: head pod {head.phase}{waiting}", status, attempt))
    trainer = obs.trainer or {}
    trainer_here = bool(trainer) and int(trainer.get("attempt") or attempt) == attempt
    if trainer_here:
        _copy_progress(status, trainer)
    if not (trainer_here and trainer.get("phase") == Phase.RUNNING) and prev_phase != Phase.RUNNING:
        return _finish(decision, obs, Phase.STARTING, Reason.WAITING_FOR_TRAINER,
                       _with_failure(f"attempt {attempt}: head running, waiting for the trainer", status, attempt))
    workers = status.workers or 0
    ready = workers >= obs.replicas
    reason = Reason.TRAINING if ready else Reason.WAITING_FOR_WORKERS
    _finish(decision, obs, Phase.RUNNING, reason, f"attempt {attempt}: {workers}/{obs.replicas} workers ready",
            ready=ready)
    if trainer_here:
        _tracking_condition(decision, obs, trainer.get("trackingProblem"))
    return decision


def _tracking_condition(decision: Decision, obs: Observation, problem: str | None) -> None:
    """TrackingDegraded: MLflow or W&B (spec.tracking) is not logging. Training goes on; the condition and a
    Warning event say why, and the condition turns False once the trainer logs again."""
    previous = next((c for c in obs.previous.conditions if c.type == ConditionType.TRACKING_DEGRADED), None)
    if not problem and previous is None:
        return
    status: ConditionStatus = "True" if problem else "False"
    reason = Reason.TRACKING_UNAVAILABLE if problem else Reason.TRACKING_LOGGING
    message = str(problem or "")[:MAX_MESSAGE]
    decision.status.conditions = set_condition(decision.status.conditions, ConditionType.TRACKING_DEGRADED, status,
                                               reason, message, obs.generation, obs.now)
    if problem and (previous is None or previous.status != "True"):
        decision.events.append(Event("Warning", Reason.TRACKING_UNAVAILABLE,
                                     f"training goes on without it: {message}"))


def _with_failure(message: str, status: RLExperimentStatus, attempt: int) -> str:
    """`message` plus why the previous attempt failed, until this attempt trains: a head that crashes in a
    loop says why in every pass, not only in events."""
    failure = status.last_failure
    if failure is None or failure.attempt != attempt - 1:
        return message
    return f"{message} (attempt {failure.attempt} failed: {failure.message})"


def _head_failed(decision: Decision, obs: Observation, attempt: int, why: str,
                 head: PodState | None = None, reason: str | None = None) -> Decision:
    """Record a head failure once per attempt; retry in a later pass, or fail past backoffLimit.
    A known `reason` (OOMKilled) names the conditions, the event and the final failure."""
    decision.status.last_failure = Failure(attempt=attempt, reason=reason or Reason.HEAD_FAILED, message=capped(why))
    if attempt > obs.failed_attempt:
        decision.restarts = obs.restarts + 1
        decision.failed_attempt = attempt
    if decision.restarts > obs.backoff_limit:
        return _fail(decision, obs, reason or Reason.BACKOFF_LIMIT_EXCEEDED,
                     f"attempt {attempt} failed ({why}); backoffLimit {obs.backoff_limit} reached", keep_head=True)
    if head is not None:
        decision.delete_pods = [head.name]
    decision.requeue_after = 0.5
    if attempt > obs.failed_attempt:
        decision.events.append(Event("Warning", reason or Reason.HEAD_FAILED,
                                     f"attempt {attempt} failed ({why}); restart {decision.restarts} of "
                                     f"{obs.backoff_limit} resumes from the last checkpoint"))
    # A named reason has said it in its Warning event: no second event for the phase change.
    return _finish(decision, obs, Phase.STARTING, reason or Reason.RESTARTING, f"attempt {attempt} failed: {why}",
                   announce=reason is None)


def _head_preempted(decision: Decision, obs: Observation, attempt: int, head: PodState) -> Decision:
    """The cluster took the head away (Kueue preemption, eviction, a node drain: a DisruptionTarget
    condition): the attempt closes without counting against backoffLimit and the next one resumes from
    the last checkpoint."""
    decision.failed_attempt = attempt
    decision.delete_pods = [p.name for p in obs.pods if not p.deleting]
    decision.requeue_after = 0.5
    decision.status.workers = 0
    message = (f"attempt {attempt} preempted ({head.disruption}); the next attempt resumes from the last "
               "checkpoint, not counted against backoffLimit")
    decision.events.append(Event("Warning", Reason.PREEMPTED, message))
    return _finish(decision, obs, Phase.PENDING, Reason.PREEMPTED, message, announce=False)


def _workers_actions(decision: Decision, obs: Observation, attempt: int) -> list[str]:
    """Delete, recreate and count the workers; what to say about those that ran out of memory."""
    ready = 0
    oom: list[str] = []
    present: set[int] = set()
    for pod in _workers(obs):
        if pod.index is None or pod.index >= obs.replicas or pod.attempt != attempt:
            decision.delete_pods.append(pod.name)  # scaled down, or left from an older attempt
            continue
        if pod.phase in (PodPhase.FAILED, PodPhase.SUCCEEDED, PodPhase.UNKNOWN):
            decision.delete_pods.append(pod.name)
            if pod.oom_killed:
                oom.append(out_of_memory(pod))
                decision.events.append(Event("Warning", Reason.OOM_KILLED, f"{oom[-1]}; recreating it"))
            else:
                decision.events.append(Event("Warning", Reason.WORKER_LOST,
                                             f"{pod.name} {pod.phase.lower()}; recreating it"))
            decision.requeue_after = 0.5
            present.add(pod.index)  # recreated in the next pass, once the old pod is gone
            continue
        present.add(pod.index)
        ready += pod.phase == PodPhase.RUNNING
    gone = {p.index for p in obs.pods if p.role == WORKER_ROLE and p.deleting and p.index is not None}
    missing = [i for i in range(obs.replicas) if i not in present and i not in gone]
    if missing:
        decision.create_workers = missing
        decision.worker_attempt = attempt
    elif gone & set(range(obs.replicas)):
        decision.requeue_after = 1.0
    decision.status.workers = ready
    return oom
