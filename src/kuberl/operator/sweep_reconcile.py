"""One reconcile pass of one RLSweep: observe (the sweep, its trials' RLExperiments) -> decide
(sweep_decision.py) -> apply (status first, then trials created, suspended, resumed).

The status is the durable search state, written with the resourceVersion it was read at: an operator
that lost its lease (or read a stale copy) gets a conflict and proposes nothing; the next pass reads
again. Synchronous, as reconcile.py; the handlers run it in a thread.
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

from kubernetes.client import ApiException
from pydantic import ValidationError

from kuberl.api.field_errors import ManifestError
from kuberl.api.sweep_types import PLURAL as SWEEP_PLURAL
from kuberl.api.sweep_types import RLSweep, RLSweepStatus
from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl.operator.builders.trial import build_trial, sweep_selector
from kuberl.operator.cluster import Cluster
from kuberl.operator.reconcile import manifest_document
from kuberl.operator.sweep_decision import SweepDecision, decide_sweep, invalid, observe_run
from kuberl.operator.sweep_decision import cluster_errors as sweep_cluster_errors

MERGE_PATCH = "application/merge-patch+json"
MAX_ERRORS_SHOWN = 10


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def validate_sweep_body(body: dict[str, Any]) -> tuple[RLSweep | None, list[str]]:
    try:
        sweep = validate_sweep_document(manifest_document(body), strict=False)
    except ManifestError as exc:
        return None, [str(e) for e in exc.errors[:MAX_ERRORS_SHOWN]]
    errors = sweep_cluster_errors(sweep)
    return (None, errors[:MAX_ERRORS_SHOWN]) if errors else (sweep, [])


def _stored_status(body: dict[str, Any]) -> RLSweepStatus | None:
    try:
        return RLSweepStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return None  # a status someone else wrote by hand: the search starts over rather than guess


class SweepApi:
    """The few API calls a sweep needs (JSON dicts in and out, idempotent writes)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.custom = cluster.custom

    def sweep(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            sweep: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, SWEEP_PLURAL,
                                                                             name)
            return sweep
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def trials(self, namespace: str, sweep: dict[str, Any]) -> list[dict[str, Any]]:
        """The sweep's RLExperiments: labelled with its name and owned by this very object (its uid)."""
        items = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, label_selector=sweep_selector(sweep["metadata"]["name"]))["items"]
        uid = sweep["metadata"]["uid"]
        return [i for i in items if any(ref.get("uid") == uid for ref in i["metadata"].get("ownerReferences") or [])]

    def patch_status(self, namespace: str, name: str, resource_version: str, status: dict[str, Any]) -> None:
        """A merge patch of the status that fails (409) if the sweep changed since it was read."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, SWEEP_PLURAL, name,
            {"metadata": {"resourceVersion": resource_version}, "status": status}, _content_type=MERGE_PATCH)

    def create_trial(self, body: dict[str, Any]) -> bool:
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, body["metadata"]["namespace"], PLURAL, body)
        except ApiException as exc:
            if exc.status == 409:
                return False  # created by an earlier pass: names are deterministic
            raise
        return True

    def set_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        try:
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                       {"spec": {"suspend": suspend}}, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _status_patch(old: dict[str, Any], new: RLSweepStatus) -> dict[str, Any]:
    body = new.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {**{key: None for key in old if key not in body}, **body}  # a merge patch removes with null


def reconcile_sweep(cluster: Cluster, namespace: str, name: str) -> SweepDecision | None:
    """One pass; None when the sweep is gone (or going)."""
    api = SweepApi(cluster)
    body = api.sweep(namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    meta, old_status = body["metadata"], body.get("status") or {}
    sweep, errors = validate_sweep_body(body)
    if sweep is None:
        status = invalid(_stored_status(body), meta.get("generation"), errors, _now())
        patch = _status_patch(old_status, status)
        if any(old_status.get(k) != v for k, v in patch.items() if k != "conditions"):
            api.patch_status(namespace, name, meta["resourceVersion"], patch)
            cluster.post_event(body, "Warning", "InvalidSpec", status.message or "")
        return SweepDecision(status=status)
    metric = sweep.spec.objective.metric
    runs = {t["metadata"]["name"]: observe_run(t, metric) for t in api.trials(namespace, body)}
    decision = decide_sweep(sweep, _stored_status(body), runs, meta.get("generation"), _now())
    patch = _status_patch(old_status, decision.status)
    if any(old_status.get(k) != v for k, v in patch.items() if k != "conditions") or \
            old_status.get("conditions") is None:
        api.patch_status(namespace, name, meta["resourceVersion"], patch)  # first: the durable state
    for record, run in decision.create:
        api.create_trial(build_trial(body, sweep.spec, record, run))
    for trial in decision.suspend:
        api.set_suspend(namespace, trial, True)
    for trial in decision.resume:
        api.set_suspend(namespace, trial, False)
    for event in decision.events:
        with contextlib.suppress(ApiException, OSError):  # best effort: the status says the same
            cluster.post_event(body, event.type, event.reason, event.message)
    return decision
