"""`kuberl logs`: the head pod's log while the pod is there, the run's storage once it is not.

The trainer tees its stdout and stderr into `logs/attempt-N/` of the run's storage
(kuberl.trainer.storage.logs), so the output of a run whose pods are gone, or whose experiment was
deleted, can still be read: from the experiment's storage, or from a run's URI or directory directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kuberl.api.types import TERMINAL_PHASES
from kuberl.client import runs
from kuberl.client.errors import ClientError, NotFound, UsageError

if TYPE_CHECKING:
    from kuberl.client.experiments import Client
    from kuberl.trainer.storage.base import ObjectStore

FOLLOW_POLL_SECONDS = 2.0


@dataclass
class LogSource:
    source: str  # "pod" or "storage"
    where: str  # the pod (namespace/name) or the storage location read
    note: str  # why this source, for stderr
    text: Iterator[str]


def is_run_location(target: str) -> bool:
    """A run's URI or directory rather than an experiment's name (names have no '/')."""
    return "://" in target or "/" in target or target in (".", "..")


def tail_lines(text: str, count: int | None) -> str:
    if count is None:
        return text
    if count <= 0:
        return ""
    lines = text.splitlines(keepends=True)
    return "".join(lines[-count:])


def pod_started(pod: dict[str, Any]) -> bool:
    """Whether the head's container ever ran (a log exists to read)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        if "running" in state or "terminated" in state:
            return True
    return False


def stored(store: ObjectStore, *, attempt: int | None, tail: int | None, note: str) -> LogSource:
    from kuberl.trainer.storage.logs import LOGS_PREFIX

    log = runs.stored_log(store, attempt)
    where = store.url(LOGS_PREFIX)
    if log is None:
        which = f"attempt {attempt}" if attempt is not None else "any attempt"
        return LogSource("storage", where, f"{note}; no output stored for {which} under {where}", iter(()))
    trimmed = f", chunks from {log.first_chunk} (older ones rotated out)" if log.first_chunk else ""
    return LogSource("storage", where, f"{note}; the trainer's output of attempt {log.attempt} from {where}{trimmed}",
                     iter([tail_lines(log.text, tail)]))


def follow_stored(store: ObjectStore, *, attempt: int | None, done: Callable[[], bool],
                  poll: float = FOLLOW_POLL_SECONDS) -> Iterator[str]:
    """New output as the trainer stores it (the newest attempt, moving on when a new one starts), until
    `done()`: then what is left, and the end."""
    from kuberl.trainer.storage.errors import NotFound as StoreNotFound
    from kuberl.trainer.storage.logs import LOGS_PREFIX, chunk_key, parse_chunk_key

    current: int | None = attempt
    printed: dict[int, int] = {}  # seq -> bytes of it shown
    finished = False
    while True:
        finished = done()  # read once more after the end: the last chunk is flushed at exit
        chunks = sorted(p for key in store.list(LOGS_PREFIX) if (p := parse_chunk_key(key)))
        newest = max((a for a, _ in chunks), default=None)
        if attempt is None and newest is not None and newest != current:
            if current is not None:
                yield f"--- attempt {newest} ---\n"
            current, printed = newest, {}
        start = max(printed, default=0)  # earlier chunks are full and shown; the last shown may have grown
        for seq in [s for a, s in chunks if a == current and s >= start]:
            assert current is not None
            try:
                data = store.get_bytes(chunk_key(current, seq))
            except StoreNotFound:  # rotated out meanwhile
                continue
            shown = printed.get(seq, 0)
            if len(data) > shown:
                yield data[shown:].decode("utf-8", errors="replace")
                printed[seq] = len(data)
        if finished:
            return
        time.sleep(poll)


def experiment_logs(client: Client, name: str, *, follow: bool = False, tail: int | None = None,
                    attempt: int | None = None, endpoint: str | None = None, storage: str | None = None) -> LogSource:
    """The experiment's output: its head pod's log through the API when the pod is there (and no attempt
    was asked for), else the run's storage. An experiment deleted with its storage kept needs `storage`
    (its spec.storage.uri)."""
    ns = client.namespace
    try:
        obj = client.get(name)
    except NotFound:
        if storage is None:
            raise NotFound(f"rlexperiment {name!r} not found in namespace {ns!r}; the output of a deleted "
                           "experiment stays in its storage: kuberl logs NAME --storage s3://BUCKET/PREFIX") from None
        obj = {"metadata": {"name": name, "namespace": ns}, "spec": {"storage": {"uri": storage}}}
        return _from_storage(client, obj, name, follow=False, tail=tail, attempt=attempt, endpoint=endpoint,
                             note=f"no rlexperiment {name!r} in namespace {ns!r}")
    if attempt is None:
        pod = client.head_pod(name)
        if pod is not None and pod_started(pod):
            try:
                text = client.pod_log(name, follow=follow, tail=tail)
                first = next(text, "")
            except ClientError as exc:
                note = f"the head pod's log cannot be read ({exc})"
            else:
                return LogSource("pod", f"{ns}/{pod['metadata']['name']}", f"the log of pod {ns}/{pod['metadata']['name']}",
                                 _prepend(first, text))
        else:
            note = "no head pod" if pod is None else "the head pod has not started"
    else:
        note = f"attempt {attempt} asked for"
    return _from_storage(client, obj, name, follow=follow, tail=tail, attempt=attempt, endpoint=endpoint,
                         note=note, storage=storage)


def _from_storage(client: Client, obj: dict[str, Any], name: str, *, follow: bool, tail: int | None,
                  attempt: int | None, endpoint: str | None, note: str, storage: str | None = None) -> LogSource:
    spec_storage = (obj.get("spec") or {}).get("storage") or {}
    store = runs.open_run(runs.run_uri(obj, storage), endpoint=endpoint or spec_storage.get("endpoint"),
                          region=spec_storage.get("region"))
    if not follow:
        return stored(store, attempt=attempt, tail=tail, note=note)

    def done() -> bool:
        try:
            phase = (client.get(name).get("status") or {}).get("phase")
        except NotFound:
            return True
        return phase in TERMINAL_PHASES

    from kuberl.trainer.storage.logs import LOGS_PREFIX

    where = store.url(LOGS_PREFIX)
    return LogSource("storage", where, f"{note}; following the trainer's output in {where}",
                     follow_stored(store, attempt=attempt, done=done))


def sweep_logs(client: Client, name: str, trial: int | None, **options: Any) -> LogSource:
    """The output of one trial of a sweep (`trial`: its number): its newest run's, as experiment_logs reads it
    (a pbt member's current round; with seedsPerTrial the first seed's). A sweep has no output of its own."""
    if trial is None:
        status = client.get_sweep(name).get("status") or {}
        numbers = [t.get("number") for t in status.get("trials") or []]
        best = (status.get("best") or {}).get("number")
        which = (f"trials {min(numbers)}-{max(numbers)}" if numbers else "no trials yet") + (
            f", the best so far {best}" if best is not None else "")
        raise UsageError(f"rlsweep {name!r} has no output of its own, its trials do ({which}): "
                         f"kuberl logs sweep/{name} --trial N")
    runs_of_trial = client.sweep_trials(name, trial=trial)
    if not runs_of_trial:
        raise NotFound(f"rlsweep {name!r} in namespace {client.namespace!r} has no run of trial {trial} "
                       "(not proposed yet, or its runs were deleted)")
    newest: str = max(runs_of_trial, key=lambda o: o["metadata"].get("creationTimestamp") or "")["metadata"]["name"]
    logs = experiment_logs(client, newest, **options)
    logs.note = f"trial {trial} of rlsweep {name!r}: run {newest}; {logs.note}"
    return logs


def run_logs(location: str, *, attempt: int | None = None, tail: int | None = None,
             endpoint: str | None = None) -> LogSource:
    """The output stored in a run given by its URI or directory (no cluster needed)."""
    return stored(runs.open_run(location, endpoint=endpoint), attempt=attempt, tail=tail, note=f"run {location}")


def _prepend(first: str, rest: Iterator[str]) -> Iterator[str]:
    if first:
        yield first
    yield from rest
