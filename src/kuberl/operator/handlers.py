"""Kopf handlers: short and idempotent; each one only triggers a reconcile of one experiment.

Shared state lives in Kopf's operator-level memo (set up at start-up; per-object memos are shallow
copies that share these containers): the settings, the API client, one lock per experiment, the
trainer progress last read, and the phase of each experiment for the metrics.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any

import aiohttp
import kopf

from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl.operator import metrics
from kuberl.operator.builders.common import APP_LABEL, ROLE_LABEL
from kuberl.operator.cluster import Cluster, load_api_client
from kuberl.operator.progress import fetch_trainer_status
from kuberl.operator.reconcile import experiment_of_pod, reconcile_pass
from kuberl.operator.settings import Settings, SettingsError
from kuberl.operator.status import TERMINAL_PHASES

MAX_PASSES = 8  # follow-up passes of one reconcile (observe what the previous pass did)
SHORT_REQUEUE = 2.0
HANDLER_BACKOFF = 2.0
API_THREADS = 16

try:
    _POLL_SECONDS = Settings.from_env().status_poll_seconds
except SettingsError:
    _POLL_SECONDS = Settings().status_poll_seconds  # start-up reports the error properly


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    # Kopf's bookkeeping goes to annotations: the CRD's status schema would prune a status.kopf field.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.posting.level = logging.WARNING  # events are the operator's own, not Kopf's log lines
    settings.watching.server_timeout = 300
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(API_THREADS, thread_name_prefix="kuberl-api"))
    memo.settings = Settings.from_env()
    memo.cluster = Cluster(load_api_client(pool_size=API_THREADS))
    memo.http = aiohttp.ClientSession()
    memo.locks = {}
    memo.queued = set()
    memo.trainer = {}
    memo.head_ips = {}
    memo.phases = {}
    memo.ensured = {}
    logger.info("kuberl operator settings: %s", memo.settings)


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("http") is not None:
        await memo.http.close()


async def reconcile(memo: kopf.Memo, namespace: str, name: str, logger: logging.Logger | Any) -> None:
    """Reconcile one experiment; concurrent triggers coalesce into one follow-up run."""
    key = (namespace, name)
    if key in memo.queued:
        return
    memo.queued.add(key)
    lock = memo.locks.setdefault(key, asyncio.Lock())
    async with lock:
        memo.queued.discard(key)
        for _ in range(MAX_PASSES):
            started = time.perf_counter()
            try:
                result = await asyncio.to_thread(
                    reconcile_pass, memo.cluster, memo.settings, namespace, name,
                    trainer=memo.trainer.get(key), ensured_generation=memo.ensured.get(key))
            except Exception:
                metrics.RECONCILES.labels(result="error").inc()
                raise
            finally:
                metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
            metrics.RECONCILES.labels(result="success").inc()
            if result is None:
                _forget(memo, key)
                return
            decision, body = result.decision, result.body
            if decision.ensure_children and not decision.use_running_spec:
                memo.ensured[key] = body["metadata"].get("generation")
            memo.phases[key] = decision.status.get("phase", "Pending")
            metrics.publish_phases(memo.phases)
            for event in decision.events:
                kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
            if decision.delete_pods and not (decision.create_head or decision.create_workers):
                continue  # look again at once: a deletion may unblock a creation (new pods trigger events)
            if decision.requeue_after is not None and decision.requeue_after <= SHORT_REQUEUE:
                await asyncio.sleep(decision.requeue_after)
                continue
            return


def _forget(memo: kopf.Memo, key: tuple[str, str]) -> None:
    for store in (memo.trainer, memo.head_ips, memo.phases, memo.ensured):
        store.pop(key, None)
    metrics.publish_phases(memo.phases)


@kopf.on.create(GROUP, VERSION, PLURAL, backoff=HANDLER_BACKOFF)
@kopf.on.resume(GROUP, VERSION, PLURAL, backoff=HANDLER_BACKOFF)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", backoff=HANDLER_BACKOFF)
async def experiment_changed(name: str, namespace: str, memo: kopf.Memo, logger: logging.Logger,
                             **_: Any) -> None:
    memo.ensured.pop((namespace, name), None)  # a new spec: the ConfigMap may need to follow
    await reconcile(memo, namespace, name, logger)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def experiment_deleted(name: str, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    _forget(memo, (namespace, name))  # ownerReferences make the children go with it
    memo.locks.pop((namespace, name), None)


@kopf.on.event("", "v1", "pods", labels={APP_LABEL: "kuberl", ROLE_LABEL: kopf.PRESENT})
async def pod_changed(event: kopf.RawEvent, body: kopf.Body, namespace: str, memo: kopf.Memo,
                      logger: logging.Logger, **_: Any) -> None:
    experiment = experiment_of_pod(dict(body))
    if experiment is None:
        return
    if event.get("type") == "ADDED" and not body.get("status", {}).get("containerStatuses"):
        return  # the operator's own fresh pod: nothing to decide until the kubelet reports on it
    if body.get("metadata", {}).get("labels", {}).get(ROLE_LABEL) == "head":
        memo.head_ips[(namespace, experiment)] = body.get("status", {}).get("podIP")
    await reconcile(memo, namespace, experiment, logger)


@kopf.timer(GROUP, VERSION, PLURAL, interval=_POLL_SECONDS, initial_delay=_POLL_SECONDS)
async def poll_progress(name: str, namespace: str, status: kopf.Status, spec: kopf.Spec, memo: kopf.Memo,
                        logger: logging.Logger, **_: Any) -> None:
    key = (namespace, name)
    phase = status.get("phase")
    if phase in TERMINAL_PHASES and spec.get("ttlSecondsAfterFinished") is None:
        return
    ip = memo.head_ips.get(key)
    if phase in ("Starting", "Running") and ip:
        trainer = await fetch_trainer_status(memo.http, ip, memo.settings.status_port)
        if trainer is not None:
            memo.trainer[key] = trainer
    await reconcile(memo, namespace, name, logger)
