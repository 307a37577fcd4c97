"""Kopf handlers: short and idempotent; each one only triggers a reconcile of one experiment.

The operator is level-triggered, as a controller is: it watches raw events (`kopf.on.event`) and
reconciles an experiment whenever its generation changes, one of its pods changes, or its poll is
due. No Kopf change-detection handlers, so Kopf keeps no bookkeeping on the object: no finalizer
(deleting an experiment never waits for the operator, even one that is uninstalled), no progress or
diff-base annotations, and no extra PATCH and watch event for each change.

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
from kopf._core.engines import posting as kopf_posting  # pinned Kopf (<1.46): see _remember_posting

from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl.operator import metrics
from kuberl.operator.builders.common import APP_LABEL, ROLE_LABEL
from kuberl.operator.cluster import Cluster, load_api_client
from kuberl.operator.progress import fetch_trainer_status
from kuberl.operator.reconcile import CREATE_THREADS, experiment_of_pod, reconcile_pass
from kuberl.operator.settings import Settings, SettingsError
from kuberl.operator.stateless import NoDiffBase, NoProgress
from kuberl.operator.status import TERMINAL_PHASES

MAX_PASSES = 8  # follow-up passes of one reconcile (observe what the previous pass did)
SHORT_REQUEUE = 2.0
RETRY_BACKOFF = (2.0, 60.0)  # first and longest wait before a failed reconcile is tried again
API_THREADS = 32
POLL_TICK = 0.5
# Operators up to 0.1 used Kopf timers, which put this finalizer on every experiment.
LEGACY_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"

try:
    _POLL_SECONDS = Settings.from_env().status_poll_seconds
except SettingsError:
    _POLL_SECONDS = Settings().status_poll_seconds  # start-up reports the error properly


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
    memo.locks = {}
    memo.queued = set()
    memo.trainer = {}
    memo.head_ips = {}
    memo.phases = {}
    memo.ensured = {}
    memo.generations = {}  # the generation each experiment was last reconciled for
    memo.ttl = {}  # spec.ttlSecondsAfterFinished: finished experiments with one are still polled
    memo.next_poll = {}
    memo.retries = {}
    memo.retry_tasks = set()
    memo.posting = {}  # Kopf's event queue, for the poll loop's passes
    memo.poller = asyncio.create_task(_poll_loop(memo, logger), name="kuberl-poll")
    logger.info("kuberl operator settings: %s", memo.settings)


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("poller") is not None:
        memo.poller.cancel()
    if memo.get("http") is not None:
        await memo.http.close()


async def reconcile(memo: kopf.Memo, namespace: str, name: str, logger: logging.Logger | Any) -> None:
    """Reconcile one experiment; concurrent triggers coalesce into one follow-up run.
    A pass that fails (the API unreachable, a conflict) is retried with backoff."""
    key = (namespace, name)
    if key in memo.queued:
        return
    memo.queued.add(key)
    lock = memo.locks.setdefault(key, asyncio.Lock())
    async with lock:
        memo.queued.discard(key)
        try:
            await _reconcile_passes(memo, key)
        except Exception as exc:  # noqa: BLE001 - logged and retried; the next trigger may also fix it
            _schedule_retry(memo, key, logger, exc)
        else:
            memo.retries.pop(key, None)


async def _reconcile_passes(memo: kopf.Memo, key: tuple[str, str]) -> None:
    namespace, name = key
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


def retry_seconds(failures: int) -> float:
    """The wait before retry number `failures`: doubling from the first to the longest; any count is
    safe (2.0 * 2**1024 would overflow a float, as the storage writers' backoff once did)."""
    first, longest = RETRY_BACKOFF
    return min(first * 2 ** min(failures - 1, 32), longest)


def _schedule_retry(memo: kopf.Memo, key: tuple[str, str], logger: logging.Logger | Any, exc: Exception) -> None:
    failures = memo.retries.get(key, 0) + 1
    memo.retries[key] = failures
    delay = retry_seconds(failures)
    logger.error("reconcile of %s/%s failed (%s: %s); retry %d in %.0f s",
                 key[0], key[1], type(exc).__name__, exc, failures, delay)

    async def retry() -> None:
        await asyncio.sleep(delay)
        if key in memo.generations:  # not deleted meanwhile
            await reconcile(memo, key[0], key[1], logger)

    task = asyncio.get_running_loop().create_task(retry())
    memo.retry_tasks.add(task)  # the loop keeps only weak references to its tasks
    task.add_done_callback(memo.retry_tasks.discard)


def _forget(memo: kopf.Memo, key: tuple[str, str]) -> None:
    for store in (memo.trainer, memo.head_ips, memo.phases, memo.ensured, memo.generations, memo.ttl,
                  memo.next_poll, memo.retries):
        store.pop(key, None)
    metrics.publish_phases(memo.phases)


def _remember_posting(memo: kopf.Memo) -> None:
    """Kopf sets its event queue in context variables of each object's handler task only; the poll loop,
    started at start-up, borrows them from the first handler so that its passes can post Events too."""
    if not memo.posting:  # a container shared by the per-object memos (see the module doc)
        memo.posting.update(loop=kopf_posting.event_queue_loop_var.get(), queue=kopf_posting.event_queue_var.get())


def _restore_posting(memo: kopf.Memo) -> None:
    if memo.posting:
        kopf_posting.event_queue_loop_var.set(memo.posting["loop"])
        kopf_posting.event_queue_var.set(memo.posting["queue"])


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
        memo.locks.pop(key, None)
        return
    memo.ttl[key] = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
    generation = meta.get("generation")
    if key in memo.generations and memo.generations[key] == generation:
        return  # the operator's own status or annotation write: nothing new to act on
    memo.generations[key] = generation
    memo.next_poll.setdefault(key, time.monotonic() + _POLL_SECONDS)
    await reconcile(memo, namespace, name, logger)


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


async def _poll_loop(memo: kopf.Memo, logger: logging.Logger) -> None:
    """Every status_poll_seconds, each experiment in turn: read the trainer's progress, reconcile.
    One loop for all experiments, each on its own schedule so that polls spread out."""
    while True:
        await asyncio.sleep(POLL_TICK)
        _restore_posting(memo)
        now = time.monotonic()
        due = [key for key, at in memo.next_poll.items() if at <= now]
        for key in due:
            memo.next_poll[key] = now + memo.settings.status_poll_seconds
        if due:
            await asyncio.gather(*(_poll(memo, key, logger) for key in due), return_exceptions=True)


async def _poll(memo: kopf.Memo, key: tuple[str, str], logger: logging.Logger) -> None:
    phase = memo.phases.get(key)
    if phase in TERMINAL_PHASES and memo.ttl.get(key) is None:
        return
    ip = memo.head_ips.get(key)
    if phase in ("Starting", "Running") and ip:
        trainer = await fetch_trainer_status(memo.http, ip, memo.settings.status_port)
        if trainer is not None:
            memo.trainer[key] = trainer
    await reconcile(memo, key[0], key[1], logger)
