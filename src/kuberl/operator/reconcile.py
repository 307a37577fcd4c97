"""One reconcile pass of one experiment: observe -> decide (status/) -> apply.

Synchronous (the kubernetes client is); the Kopf handlers run it in a thread. It returns the
decision and the events to post, and never keeps state of its own: what it needs across passes
is in the experiment's status and annotations, so an operator restart continues where it stopped.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from kuberl.api.contract import (
    FAILED_ATTEMPT_ANNOTATION,
    REQUIRED_CREDENTIAL_KEYS,
    RESTARTS_ANNOTATION,
    WORKER_ROLE,
    TrainerStatus,
)
from kuberl.api.field_errors import ManifestError
from kuberl.api.types import TERMINAL_PHASES, RLExperiment
from kuberl.api.validation import cluster_errors, validate_document
from kuberl.api.yaml_text import load_yaml
from kuberl.operator import names
from kuberl.operator.builders import (
    Owner,
    build_config_map,
    build_head_pod,
    build_head_service,
    build_network_policy,
    build_token_secret,
    build_worker_pod,
    new_token,
    owner_of,
    resolve_experiment,
)
from kuberl.operator.builders.common import selector
from kuberl.operator.builders.configmap import EXPERIMENT_FILE
from kuberl.operator.builders.podgroup import Placement, build_pod_group, place_pod, placement_of
from kuberl.operator.cluster import Cluster, QuotaExceeded, Rejected
from kuberl.operator.settings import Settings
from kuberl.operator.status import (
    KUEUE_MUTABLE_FIELDS,
    MUTABLE_FIELDS,
    Decision,
    Observation,
    PodState,
    Reason,
    decide,
    pod_state,
    refused_changes,
    stalled,
    status_of,
    with_mutable_fields,
)
from kuberl.operator.status.observation import STATUS_FIELDS

MAX_ERRORS_SHOWN = 10
CREATE_THREADS = 32
_creators = concurrent.futures.ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="kuberl-create")


@dataclass
class PassResult:
    body: dict[str, Any]
    decision: Decision


def _int_annotation(meta: dict[str, Any], key: str) -> int:
    try:
        return int((meta.get("annotations") or {}).get(key, "0"))
    except ValueError:
        return 0


def manifest_document(body: dict[str, Any]) -> dict[str, Any]:
    """The parts of an API object that its manifest validates: the API server's own metadata and status left out."""
    meta = body.get("metadata") or {}
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "spec": body.get("spec") if body.get("spec") is not None else {}}


def validate_body(body: dict[str, Any]) -> tuple[RLExperiment | None, tuple[str, ...]]:
    """The experiment from an API object, or the errors that name the fields (schema, cross-field, cluster).

    Validation ratchets, as the API server's does: a generation of the spec that an operator accepted before
    (an earlier version, before an upgrade) keeps its settings without effect, which this version refuses only
    in a new or changed spec; an experiment queued or suspended across the upgrade is not failed for them."""
    try:
        experiment = validate_document(manifest_document(body), strict=False, stored=accepted_before(body))
    except ManifestError as exc:
        return None, tuple(str(e) for e in exc.errors[:MAX_ERRORS_SHOWN])
    errors = cluster_errors(experiment)
    return (None, tuple(str(e) for e in errors[:MAX_ERRORS_SHOWN])) if errors else (experiment, ())


def accepted_before(body: dict[str, Any]) -> bool:
    """Whether an operator's pass observed this generation of the spec and did not refuse it."""
    status = status_of(body.get("status"))
    generation = (body.get("metadata") or {}).get("generation")
    refusal = stalled(status.conditions)
    refused = refusal is not None and refusal.reason == Reason.INVALID_SPEC
    return generation is not None and status.observed_generation == generation and not refused


def _missing_secret(cluster: Cluster, experiment: RLExperiment, namespace: str) -> str | None:
    return _missing_storage_secret(cluster, experiment, namespace) or _missing_wandb_secret(cluster, experiment,
                                                                                           namespace)


def _missing_wandb_secret(cluster: Cluster, experiment: RLExperiment, namespace: str) -> str | None:
    wandb = experiment.spec.tracking.wandb
    ref = wandb.api_key_secret_ref if wandb is not None else None
    if ref is None:
        return None
    secret = cluster.secret(namespace, ref.name)
    if secret is None:
        return f"spec.tracking.wandb.apiKeySecretRef: Secret {ref.name!r} not found in namespace {namespace!r}"
    if ref.key not in {**(secret.get("data") or {}), **(secret.get("stringData") or {})}:
        return f"spec.tracking.wandb.apiKeySecretRef: Secret {ref.name!r} has no key {ref.key}"
    return None


def _missing_storage_secret(cluster: Cluster, experiment: RLExperiment, namespace: str) -> str | None:
    ref = experiment.spec.storage.secret_ref
    if ref is None:
        return None
    secret = cluster.secret(namespace, ref.name)
    if secret is None:
        return f"spec.storage.secretRef: Secret {ref.name!r} not found in namespace {namespace!r}"
    data = {**(secret.get("data") or {}), **(secret.get("stringData") or {})}
    missing = [k for k in REQUIRED_CREDENTIAL_KEYS if k not in data]
    if missing:
        return f"spec.storage.secretRef: Secret {ref.name!r} has no key {', '.join(missing)}"
    return None


def _running_spec(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    config = cluster.config_map(namespace, names.config_map_name(name))
    if config is None:
        return None
    try:
        return (load_yaml((config.get("data") or {}).get(EXPERIMENT_FILE, "")) or {}).get("spec")
    except (yaml.YAMLError, ManifestError):
        return None


def _running_experiment(body: dict[str, Any], spec: dict[str, Any] | None) -> RLExperiment | None:
    """The experiment as its pods run it (`spec`: the ConfigMap's), or None where there is none that validates."""
    if spec is None:
        return None
    try:
        return validate_document({**manifest_document(body), "spec": spec}, strict=False, stored=True)
    except ManifestError:
        return None


def _ours(pod: PodState, body: dict[str, Any], uid: str | None) -> PodState:
    """A pod with the experiment's labels that a former experiment of the same name owns (deleted and applied
    again before the garbage collector took its pods) is on its way out: never this experiment's to count,
    adopt or delete, and its name is taken until it goes."""
    owner = next((ref.get("uid") for ref in (body.get("metadata") or {}).get("ownerReferences") or []
                  if ref.get("controller")), None)
    return dataclasses.replace(pod, deleting=True) if uid and owner and owner != uid else pod


def all_at_once(calls: list[Callable[[], bool]]) -> list[bool]:
    """Independent API calls, sent together (one round trip instead of one each); the first error is
    raised once every call has finished, so that a retry sees the whole outcome."""
    futures = [_creators.submit(call) for call in calls]
    concurrent.futures.wait(futures)
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error
    return [future.result() for future in futures]


def ensure_children(cluster: Cluster, experiment: RLExperiment, owner: Owner, settings: Settings, *,
                    update_config: bool) -> None:
    """Secret, ConfigMap, Service and NetworkPolicy; each created once, the ConfigMap kept current."""
    config = build_config_map(experiment, owner)
    children = [build_token_secret(owner, new_token()),  # an existing token is kept
                config,
                build_head_service(owner, status_port=settings.status_port),
                build_network_policy(owner, operator_namespace=settings.operator_namespace,
                                     prometheus_namespace=settings.prometheus_namespace,
                                     status_port=settings.status_port)]
    created = dict(zip(("secret", "config", "service", "policy"),
                       all_at_once([functools.partial(cluster.create, body) for body in children]), strict=True))
    if not created["config"] and update_config:
        existing = cluster.config_map(owner.namespace, config["metadata"]["name"]) or {}
        if existing.get("data") != config["data"]:
            cluster.replace_config_map_data(owner.namespace, config["metadata"]["name"], config["data"])


def _status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch from old to new status (removed keys become null)."""
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


def reconcile_pass(cluster: Cluster, settings: Settings, namespace: str, name: str, *,
                   trainer: TrainerStatus | None, ensured_generation: int | None,
                   now: datetime.datetime | None = None) -> PassResult | None:
    """Observe, decide, apply. `ensured_generation`: the generation whose children (ConfigMap included)
    this operator process already wrote, so that a pass can skip re-reading and re-creating them."""
    body = cluster.experiment(namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None  # deleted: the garbage collector removes the children
    meta = body["metadata"]
    previous = status_of(body.get("status"))
    now = now or datetime.datetime.now(tz=datetime.UTC)
    pods = [_ours(pod_state(p), p, meta.get("uid")) for p in cluster.pods(namespace, selector(name))]
    live_pods = any(not p.deleting for p in pods)
    terminal = previous.phase in TERMINAL_PHASES
    experiment, errors = validate_body(body)
    invalid_edit: tuple[str, ...] = ()
    # an edit the pods cannot take: they go on with what they run
    read_spec = _running_spec(cluster, namespace, name) if errors and live_pods and not terminal else None
    running = _running_experiment(body, read_spec)
    if running is not None:
        experiment, invalid_edit, errors = running, errors, ()
    resolved = resolve_experiment(experiment, settings, namespace) if experiment else None

    generation = int(meta.get("generation") or 1)
    children_ready = ensured_generation == generation
    # The ConfigMap holds the spec the pods run; it can differ from the asked one only after a spec change.
    check_running = resolved is not None and live_pods and not terminal and not children_ready
    running_spec = (read_spec if read_spec is not None else _running_spec(cluster, namespace, name)) \
        if check_running else None
    desired_spec = resolved.spec.to_manifest() if resolved else {}
    placement = placement_of(meta.get("labels"), resolved) if resolved else Placement()
    mutable = KUEUE_MUTABLE_FIELDS if placement.queue else MUTABLE_FIELDS
    refused = refused_changes(running_spec, desired_spec, mutable)
    replicas = resolved.spec.workers.replicas if resolved else 0
    if refused and running_spec is not None:  # the pods keep running as they were, replicas too under Kueue
        replicas = with_mutable_fields(running_spec, desired_spec, mutable).get("workers", {}).get("replicas", 0)
    observation = Observation(
        generation=generation, now=now, previous=previous, spec_errors=errors, kueue=bool(placement.queue),
        replicas=replicas,
        backoff_limit=resolved.spec.backoff_limit if resolved else 0,
        suspend=resolved.spec.suspend if resolved else False,
        ttl_seconds=resolved.spec.ttl_seconds_after_finished if resolved else None,
        refused_changes=refused, invalid_edit=invalid_edit,
        missing_secret=_missing_secret(cluster, resolved, namespace) if resolved and not terminal else None,
        pods=tuple(pods), trainer=trainer,
        restarts=_int_annotation(meta, RESTARTS_ANNOTATION),
        failed_attempt=_int_annotation(meta, FAILED_ATTEMPT_ANNOTATION),
    )
    decision = decide(observation)
    try:
        _apply(cluster, settings, body, resolved, running_spec, decision, placement, children_ready=children_ready)
    except Rejected as exc:  # fail fast with the API server's reason, instead of retrying forever
        decision = decide(dataclasses.replace(observation, create_rejected=str(exc)))
        _apply(cluster, settings, body, resolved, running_spec, decision, placement, children_ready=True)
    except QuotaExceeded as exc:  # wait, saying why, rather than retry at every poll in silence
        decision = decide(dataclasses.replace(observation, quota_exceeded=str(exc)))
        _apply(cluster, settings, body, resolved, running_spec, decision, placement, children_ready=True)
    return PassResult(body, decision)


def ensure_pod_group(cluster: Cluster, experiment: RLExperiment, owner: Owner, placement: Placement,
                     status_port: int) -> None:
    """The gang scheduler's PodGroup: created before the pods, resized when the workers change."""
    group = build_pod_group(experiment, owner, placement,
                            build_head_pod(experiment, owner, 0, status_port=status_port),
                            build_worker_pod(experiment, owner, 0, 0, status_port=status_port))
    if group is not None and not cluster.create(group):
        existing = cluster.pod_group(group["apiVersion"], owner.namespace, group["metadata"]["name"]) or {}
        if existing.get("spec", {}) | group["spec"] != existing.get("spec"):
            cluster.patch_pod_group_spec(group["apiVersion"], owner.namespace, group["metadata"]["name"],
                                         group["spec"])


def _apply(cluster: Cluster, settings: Settings, body: dict[str, Any], resolved: RLExperiment | None,
           running_spec: dict[str, Any] | None, decision: Decision, placement: Placement, *,
           children_ready: bool) -> None:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    owner = owner_of(body)
    # Record a counted failure before acting on it, so that no crash can lose it.
    annotations = {RESTARTS_ANNOTATION: str(decision.restarts), FAILED_ATTEMPT_ANNOTATION: str(decision.failed_attempt)}
    current = {k: (meta.get("annotations") or {}).get(k) for k in annotations}
    if (decision.restarts or decision.failed_attempt) and current != annotations:
        cluster.patch_experiment_annotations(namespace, name, dict(annotations))
    for pod in decision.delete_pods:
        cluster.delete_pod(namespace, pod)
    if resolved is not None and decision.ensure_children:
        effective = resolved
        if decision.use_running_spec and running_spec is not None:
            doc = {"apiVersion": resolved.api_version, "kind": resolved.kind,
                   "metadata": {"name": name, "namespace": namespace},
                   "spec": with_mutable_fields(running_spec, resolved.spec.to_manifest(),
                                               KUEUE_MUTABLE_FIELDS if placement.queue else MUTABLE_FIELDS)}
            effective = validate_document(doc, strict=False)
        if not children_ready or decision.create_head:
            ensure_children(cluster, effective, owner, settings, update_config=not decision.use_running_spec)
            ensure_pod_group(cluster, effective, owner, placement, settings.status_port)
        total = 1 + effective.spec.workers.replicas  # the Kueue pod group: head and workers of one attempt
        # The head before its workers: whatever a crash leaves, no worker ever exists without its head.
        if decision.create_head:
            head = build_head_pod(effective, owner, decision.create_head, status_port=settings.status_port)
            cluster.create(place_pod(head, placement, owner, attempt=decision.create_head, total=total))
        workers = [place_pod(build_worker_pod(effective, owner, index, decision.worker_attempt,
                                              status_port=settings.status_port),
                             placement, owner, attempt=decision.worker_attempt, total=total)
                   for index in decision.create_workers]
        all_at_once([functools.partial(cluster.create, body) for body in workers])
    decision.status.selector = selector(name, WORKER_ROLE) if resolved else None
    stored = {k: v for k, v in (body.get("status") or {}).items() if k in STATUS_FIELDS}  # the rest is not ours
    patch = _status_patch(stored, decision.status.to_manifest())
    if patch:
        cluster.patch_experiment_status(namespace, name, patch)


def experiment_of_pod(body: dict[str, Any]) -> str | None:
    """The RLExperiment that owns a pod (by ownerReference), if any."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "RLExperiment" and ref.get("apiVersion", "").startswith("kuberl.io/"):
            owner: str | None = ref.get("name")
            return owner
    return None

