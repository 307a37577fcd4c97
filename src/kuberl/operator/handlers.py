"""Kopf handlers: short and idempotent; each one only triggers a reconcile of one experiment.

The operator is level-triggered, as a controller is: it watches raw events (`kopf.on.event`) and
reconciles an experiment whenever its generation changes, one of its pods changes, or its poll is
due. No Kopf change-detection handlers, so Kopf keeps no bookkeeping on the object: no finalizer
(deleting an experiment never waits for the operator, even one that is uninstalled), no progress or
diff-base annotations, and no extra PATCH and watch event for each change.

Shared state lives in Kopf's operator-level memo (set up at start-up; per-object memos are shallow
copies that share it): the settings, the API client, the experiments' records and their
reconcile queue (`experiments.py`), and Kopf's event queue borrowed for the poll loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any

import aiohttp
import kopf
from kopf._core.engines import posting as kopf_posting  # pinned Kopf (<1.46): see _remember_posting

from kuberl.api.contract import APP_LABEL, APP_NAME, HEAD_ROLE, ROLE_LABEL
from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl.operator import metrics
from kuberl.operator.cluster import Cluster, load_api_client
from kuberl.operator.experiments import Experiment, ExperimentQueue, Key
from kuberl.operator.progress import fetch_trainer_status
from kuberl.operator.reconcile import CREATE_THREADS, experiment_of_pod, reconcile_pass
from kuberl.operator.settings import Settings
from kuberl.operator.stateless import NoDiffBase, NoProgress
from kuberl.operator.status import TERMINAL_PHASES

MAX_PASSES = 8  # follow-up passes of one reconcile (observe what the previous pass did)
SHORT_REQUEUE = 2.0
API_THREADS = 32
POLL_TICK = 0.5
POLLED_PHASES = ("Starting", "Running")  # the phases in which the head's trainer serves its progress
# Operators up to 0.1 used Kopf timers, which put this finalizer on every experiment.
LEGACY_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    settings.persistence.diffbase_storage = NoDiffBase()  # no change handlers: nothing to diff or record
    settings.persistence.progress_storage = NoProgress()
    settings.posting.level = logging.WARNING  # events are the operator's own, not Kopf's log lines
    settings.watching.server_timeout = 300
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(API_THREADS, thread_name_prefix="kuberl-api"))
    memo.settings = Settings.from_env()
    memo.cluster = Cluster(load_api_client(pool_size=API_THREADS + CREATE_THREADS))
    memo.http = aiohttp.ClientSession()
    memo.experiments = ExperimentQueue(lambda record: _reconcile_passes(memo, record))
    memo.posting = {}  # Kopf's event queue, for the poll loop's passes (see _remember_posting)
    memo.poller = asyncio.create_task(_poll_loop(memo, logger), name="kuberl-poll")
    logger.info("kuberl operator settings: %s", memo.settings)


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("poller") is not None:
        memo.poller.cancel()
    if memo.get("http") is not None:
        await memo.http.close()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def experiment_event(event: kopf.RawEvent, body: kopf.Body, name: str, namespace: str, memo: kopf.Memo,
                           logger: logging.Logger, **_: Any) -> None:
    _remember_posting(memo)
    key = (namespace, name)
    meta = body.get("metadata", {})
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        if LEGACY_FINALIZER in (meta.get("finalizers") or []):
            await asyncio.to_thread(memo.cluster.remove_experiment_finalizer, namespace, name, LEGACY_FINALIZER)
        _forget(memo, key)  # ownerReferences make the children go with it
        return
    record = memo.experiments.record(key)
    record.ttl_seconds = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
    generation = meta.get("generation")
    if record.known and record.generation == generation:
        return  # the operator's own status or annotation write: nothing new to act on
    record.known, record.generation = True, generation
    if record.next_poll is None:
        record.next_poll = time.monotonic() + memo.settings.status_poll_seconds
    await memo.experiments.reconcile(key, logger)


@kopf.on.event("", "v1", "pods", labels={APP_LABEL: APP_NAME, ROLE_LABEL: kopf.PRESENT})
async def pod_changed(event: kopf.RawEvent, body: kopf.Body, namespace: str, memo: kopf.Memo,
                      logger: logging.Logger, **_: Any) -> None:
    experiment = experiment_of_pod(dict(body))
    if experiment is None:
        return
    if event.get("type") == "ADDED" and not body.get("status", {}).get("containerStatuses"):
        return  # the operator's own fresh pod: nothing to decide until the kubelet reports on it
    if body.get("metadata", {}).get("labels", {}).get(ROLE_LABEL) == HEAD_ROLE:
        memo.experiments.record((namespace, experiment)).head_ip = body.get("status", {}).get("podIP")
    await memo.experiments.reconcile((namespace, experiment), logger)


async def _reconcile_passes(memo: kopf.Memo, record: Experiment) -> None:
    """Observe, decide and apply until the decision needs no immediate second look."""
    namespace, name = record.key
    for _ in range(MAX_PASSES):
        started = time.perf_counter()
        try:
            result = await asyncio.to_thread(
                reconcile_pass, memo.cluster, memo.settings, namespace, name,
                trainer=record.trainer, ensured_generation=record.ensured)
        except Exception:
            metrics.RECONCILES.labels(result="error").inc()
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
        metrics.RECONCILES.labels(result="success").inc()
        if result is None:
            _forget(memo, record.key)
            return
        decision, body = result.decision, result.body
        if decision.ensure_children and not decision.use_running_spec:
            record.ensured = body["metadata"].get("generation")
        record.phase = decision.status.get("phase", "Pending")
        metrics.publish_phases(memo.experiments.phases())
        for event in decision.events:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
        if decision.delete_pods and not (decision.create_head or decision.create_workers):
            continue  # look again at once: a deletion may unblock a creation (new pods trigger events)
        if decision.requeue_after is not None and decision.requeue_after <= SHORT_REQUEUE:
            await asyncio.sleep(decision.requeue_after)
            continue
        return


def _forget(memo: kopf.Memo, key: Key) -> None:
    memo.experiments.forget(key)
    metrics.publish_phases(memo.experiments.phases())


def _remember_posting(memo: kopf.Memo) -> None:
    """Kopf sets its event queue in context variables of each object's handler task only; the poll loop,
    started at start-up, borrows them from the first handler so that its passes can post Events too."""
    if not memo.posting:  # a container shared by the per-object memos (see the module doc)
        memo.posting.update(loop=kopf_posting.event_queue_loop_var.get(), queue=kopf_posting.event_queue_var.get())


def _restore_posting(memo: kopf.Memo) -> None:
    if memo.posting:
        kopf_posting.event_queue_loop_var.set(memo.posting["loop"])
        kopf_posting.event_queue_var.set(memo.posting["queue"])


async def _poll_loop(memo: kopf.Memo, logger: logging.Logger) -> None:
    """Every status_poll_seconds, each experiment in turn: read the trainer's progress, reconcile.
    One loop for all experiments, each on its own schedule so that polls spread out."""
    while True:
        await asyncio.sleep(POLL_TICK)
        _restore_posting(memo)
        due = memo.experiments.due_polls(time.monotonic(), memo.settings.status_poll_seconds)
        if due:
            await asyncio.gather(*(_poll(memo, record, logger) for record in due), return_exceptions=True)


async def _poll(memo: kopf.Memo, record: Experiment, logger: logging.Logger) -> None:
    if record.phase in TERMINAL_PHASES and record.ttl_seconds is None:
        return
    if record.phase in POLLED_PHASES and record.head_ip:
        trainer = await fetch_trainer_status(memo.http, record.head_ip, memo.settings.status_port)
        if trainer is not None:
            record.trainer = trainer
    await memo.experiments.reconcile(record.key, logger)
