"""Kopf handlers: short and idempotent; each one only triggers a reconcile of one experiment.

The operator is level-triggered, as a controller is: it watches raw events (`kopf.on.event`) and
reconciles an experiment whenever its generation changes, one of its pods changes, or its poll is
due. No Kopf change-detection handlers, so Kopf keeps no bookkeeping on the object: no finalizer
(deleting an experiment never waits for the operator, even one that is uninstalled), no progress or
diff-base annotations, and no extra PATCH and watch event for each change.

Shared state lives in Kopf's operator-level memo (set up at start-up; per-object memos are shallow
copies that share it): the settings, the API client, the experiments' records and their
reconcile queue (`experiments.py`). A pass's events go out through the API client
(`Cluster.post_event`), whichever path started it: a watch event, a retry or the poll loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from typing import Any

import aiohttp
import kopf
import urllib3
from kubernetes.client import ApiException

from kuberl.api.contract import APP_LABEL, APP_NAME, HEAD_ROLE, ROLE_LABEL
from kuberl.api.types import GROUP, PLURAL, TERMINAL_PHASES, VERSION, Phase
from kuberl.operator import metrics
from kuberl.operator.cluster import REQUEST_TIMEOUT, Cluster, load_api_client
from kuberl.operator.experiments import Experiment, ExperimentQueue, Key, retry_seconds
from kuberl.operator.progress import fetch_trainer_status
from kuberl.operator.reconcile import CREATE_THREADS, experiment_of_pod, reconcile_pass
from kuberl.operator.settings import Settings
from kuberl.operator.stateless import NoDiffBase, NoProgress
from kuberl.operator.status import Event

MAX_PASSES = 8  # follow-up passes of one reconcile (observe what the previous pass did)
SHORT_REQUEUE = 2.0
API_THREADS = 32
POLL_TICK = 0.5
POLLED_PHASES = (Phase.STARTING, Phase.RUNNING)  # the phases in which the head's trainer serves its progress
# Operators up to 0.1 used Kopf timers, which put this finalizer on every experiment.
LEGACY_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
LOGGER = logging.getLogger("kuberl.operator")


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    settings.persistence.diffbase_storage = NoDiffBase()  # no change handlers: nothing to diff or record
    settings.persistence.progress_storage = NoProgress()
    settings.posting.level = logging.WARNING  # events are the operator's own, not Kopf's log lines
    settings.watching.server_timeout = 300
    # A watch whose connection drops without a word would otherwise wait for events for ever: the client ends
    # it a little after the server should have, and Kopf starts a new one. Other requests: cluster.py's limits.
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = REQUEST_TIMEOUT[0]
    settings.networking.connect_timeout = REQUEST_TIMEOUT[0]
    settings.networking.request_timeout = REQUEST_TIMEOUT[1]
    # The API server filters the pod watch: the operator never receives the namespace's (or cluster's) other pods.
    settings.watching.label_selectors["v1", "pods"] = f"{APP_LABEL}={APP_NAME},{ROLE_LABEL}"
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(API_THREADS, thread_name_prefix="kuberl-api"))
    memo.settings = Settings.from_env()
    memo.cluster = Cluster(load_api_client(pool_size=API_THREADS + CREATE_THREADS))
    memo.http = aiohttp.ClientSession()
    memo.experiments = ExperimentQueue(lambda record: _reconcile_passes(memo, record))
    memo.poller = asyncio.create_task(_poll_loop(memo, logger), name="kuberl-poll")
    logger.info("kuberl operator settings: %s", memo.settings)


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("poller") is not None:
        memo.poller.cancel()
    if memo.get("http") is not None:
        await memo.http.close()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def experiment_event(event: kopf.RawEvent, body: kopf.Body, name: str, namespace: str | None,
                           memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    if namespace is None:  # RLExperiments are namespaced: Kopf always names one
        return
    key = (namespace, name)
    meta = body.get("metadata", {})
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        if LEGACY_FINALIZER in (meta.get("finalizers") or []):
            await asyncio.to_thread(memo.cluster.remove_experiment_finalizer, namespace, name, LEGACY_FINALIZER)
        _forget(memo, key)  # ownerReferences make the children go with it
        return
    record = memo.experiments.record(key)
    generation = meta.get("generation")
    if record.known and record.generation == generation:
        return  # the operator's own status or annotation write: nothing new to act on
    record.known, record.generation = True, generation
    if record.next_poll is None:
        record.next_poll = time.monotonic() + memo.settings.status_poll_seconds
    await memo.experiments.reconcile(key, logger)


@kopf.on.event("", "v1", "pods", labels={APP_LABEL: APP_NAME, ROLE_LABEL: kopf.PRESENT})
async def pod_changed(event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: kopf.Memo,
                      logger: kopf.Logger, **_: Any) -> None:
    experiment = experiment_of_pod(dict(body))
    if experiment is None or namespace is None:
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
        record.phase = decision.status.phase or Phase.PENDING
        metrics.publish_phases(memo.experiments.phases())
        if decision.events:
            await asyncio.to_thread(_post_events, memo.cluster, body, decision.events)
        if decision.quota_wait:  # nothing to do until the quota allows the pod: look again later and later
            record.quota_waits += 1
            record.next_poll = time.monotonic() + retry_seconds(record.quota_waits)
            return
        record.quota_waits = 0
        if decision.delete_pods and not (decision.create_head or decision.create_workers):
            continue  # look again at once: a deletion may unblock a creation (new pods trigger events)
        if record.phase in TERMINAL_PHASES:  # nothing to look at until ttlSecondsAfterFinished expires, if ever
            record.next_poll = finished_poll(decision.requeue_after, time.monotonic())
            return
        if decision.requeue_after is not None and decision.requeue_after <= SHORT_REQUEUE:
            await asyncio.sleep(decision.requeue_after)
            continue
        return


def finished_poll(ttl_left: float | None, now: float) -> float | None:
    """The next poll of a finished experiment whose pods are deleted as far as they can be now: when its TTL
    expires, or none (an edit of the spec still triggers a pass)."""
    return None if ttl_left is None else now + ttl_left


def _post_events(cluster: Cluster, body: dict[str, Any], events: list[Event]) -> None:
    """Post the decision's events through the API client, whichever path started the pass (a watch
    event, a retry or the poll loop); one that cannot be written is logged, not retried."""
    for event in events:
        try:
            cluster.post_event(body, event.type, event.reason, event.message)
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            LOGGER.warning("event %s for %s/%s not posted: %s", event.reason, body["metadata"].get("namespace"),
                           body["metadata"].get("name"), exc)


def _forget(memo: kopf.Memo, key: Key) -> None:
    memo.experiments.forget(key)
    metrics.publish_phases(memo.experiments.phases())


async def _poll_loop(memo: kopf.Memo, logger: kopf.Logger) -> None:
    """Every status_poll_seconds, each experiment in turn: read the trainer's progress, reconcile.
    One loop for all experiments, each on its own schedule so that polls spread out, and each poll its own task:
    an experiment whose pass hangs on the API skips its own polls until it returns, and holds up no other's."""
    polling: dict[Key, asyncio.Task[None]] = {}
    try:
        while True:
            await asyncio.sleep(POLL_TICK)
            for record in memo.experiments.due_polls(time.monotonic(), memo.settings.status_poll_seconds):
                if record.key not in polling:
                    task = asyncio.create_task(_poll(memo, record, logger), name=f"kuberl-poll-{record.key}")
                    polling[record.key] = task
                    task.add_done_callback(functools.partial(_poll_done, polling, record.key))
    finally:
        for task in polling.values():
            task.cancel()


def _poll_done(polling: dict[Key, asyncio.Task[None]], key: Key, task: asyncio.Task[None]) -> None:
    polling.pop(key, None)
    if not task.cancelled() and task.exception() is not None:
        LOGGER.warning("poll of %s/%s failed: %s", *key, task.exception())


async def _poll(memo: kopf.Memo, record: Experiment, logger: kopf.Logger) -> None:
    if record.phase in POLLED_PHASES and record.head_ip:
        trainer = await fetch_trainer_status(memo.http, record.head_ip, memo.settings.status_port)
        if trainer is not None:
            record.trainer = trainer
    await memo.experiments.reconcile(record.key, logger)


# RLSweep: its own handlers, registered with these (kuberl.operator.handlers is the module Kopf runs).
from kuberl.operator import sweep_handlers  # noqa: E402, F401
