"""Kopf handlers for RLSweep: short and idempotent; each only triggers a reconcile of one sweep.

A sweep is reconciled when its generation changes (a new spec: suspend, maxTrials, ...) and whenever
one of its trials' RLExperiments changes (progress in their status, a phase). The queue is the
experiments' (experiments.py): one reconcile at a time per sweep, triggers coalesced, retries with
backoff. The operator keeps nothing of a sweep in memory that its status does not hold.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from kuberl.api.sweep_types import KIND as SWEEP_KIND
from kuberl.api.sweep_types import PLURAL as SWEEP_PLURAL
from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl.operator.builders.trial import SWEEP_LABEL
from kuberl.operator.experiments import Experiment, ExperimentQueue
from kuberl.operator.sweep_reconcile import reconcile_sweep


@kopf.on.startup()
async def configure_sweeps(memo: kopf.Memo, **_: Any) -> None:
    memo.sweeps = ExperimentQueue(lambda record: _reconcile(memo, record))


@kopf.on.event(GROUP, VERSION, SWEEP_PLURAL)
async def sweep_event(event: kopf.RawEvent, body: kopf.Body, name: str, namespace: str | None, memo: kopf.Memo,
                      logger: kopf.Logger, **_: Any) -> None:
    if namespace is None:  # RLSweeps are namespaced: Kopf always names one
        return
    key = (namespace, name)
    meta = body.get("metadata", {})
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        memo.sweeps.forget(key)  # ownerReferences make the trials go with it
        return
    record = memo.sweeps.record(key)
    if record.known and record.generation == meta.get("generation"):
        return  # the operator's own status write
    record.known, record.generation = True, meta.get("generation")
    await memo.sweeps.reconcile(key, logger)


@kopf.on.event(GROUP, VERSION, PLURAL, labels={SWEEP_LABEL: kopf.PRESENT})
async def trial_event(body: kopf.Body, namespace: str | None, memo: kopf.Memo, logger: kopf.Logger,
                      **_: Any) -> None:
    owner = next((ref.get("name") for ref in body.get("metadata", {}).get("ownerReferences") or []
                  if ref.get("kind") == SWEEP_KIND), None)
    if owner is not None and namespace is not None:
        await memo.sweeps.reconcile((namespace, owner), logger)


async def _reconcile(memo: kopf.Memo, record: Experiment) -> None:
    namespace, name = record.key
    if await asyncio.to_thread(reconcile_sweep, memo.cluster, namespace, name) is None:
        memo.sweeps.forget(record.key)
