"""`Client`: RLExperiments and RLSweeps through the Kubernetes API, for notebooks and for `kuberl`'s
cluster commands.

    from kuberl.client import Client
    client = Client()                      # the current kubeconfig context and its namespace
    client.submit("examples/cartpole-ppo.yaml", overrides=["storage.uri=s3://bucket/runs"])
    client.wait("cartpole-ppo", timeout=3600)
    client.results("cartpole-ppo")[-1]["episodeReturnMean"]

    client.submit("examples/sweeps/cartpole-lr.yaml", overrides=["template.storage.uri=s3://bucket/runs"])
    client.wait_sweep("cartpole-lr")["status"]["best"]      # {number, name, params, value}

The experiment verbs (get, list, delete, events, status, wait) have sweep twins (get_sweep, list_sweeps,
delete_sweep, sweep_events, sweep_status, wait_sweep), and sweep_trials lists a sweep's trial runs.

Every failure is a ClientError (kuberl.client.errors) naming the experiment and the namespace; a bad
manifest is a ManifestError naming the field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.api.contract import APP_LABEL, APP_NAME, HEAD_ROLE
from kuberl.api.types import API_VERSION, GROUP, TERMINAL_PHASES, VERSION, Phase
from kuberl.client import runs
from kuberl.client.connection import Connection, connect
from kuberl.client.errors import Ambiguous, ClientError, Forbidden, NotFound, WaitTimeout, from_api_error
from kuberl.client.formatting import recent_events, status_document, sweep_status_document
from kuberl.client.kinds import EXPERIMENT, SWEEP, Kind, parse_reference
from kuberl.client.manifests import ManifestSource, prepare
from kuberl.operator import names

if TYPE_CHECKING:
    from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
    from kuberl.trainer.storage.logs import StoredLog

REQUEST_TIMEOUT = (10.0, 60.0)  # connect, read: an unreachable server fails in seconds, not minutes
HEAD_CONTAINER = HEAD_ROLE  # the head pod's one container (operator/builders/pod.py)
FIELD_VALIDATION = "Strict"  # the fieldValidation asked of the API server on create
SWEEP_LABEL = "kuberl.io/sweep"  # on a sweep's trial runs (operator/builders/trial.py), with TRIAL_LABEL
TRIAL_LABEL = "kuberl.io/trial"
Waited = Callable[[dict[str, Any]], None]
# `Client.list` hides the builtin in the class's annotations: these aliases name its results.
Objects = list[dict[str, Any]]
Kinds = list[Kind]
Checkpoints = list["CheckpointInfo"]


class Client:
    """One cluster context and namespace; each method's `namespace` overrides the namespace for one call."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None,
                 *, connection: Connection | None = None) -> None:
        from kubernetes import client as k8s

        self.connection = connection or connect(kubeconfig, context, namespace)
        self.namespace = self.connection.namespace
        self.custom = k8s.CustomObjectsApi(self.connection.api)
        self.core = k8s.CoreV1Api(self.connection.api)

    # -- the resource ---------------------------------------------------------------------------------
    def submit(self, source: ManifestSource, *, overrides: list[str] | None = None,
               namespace: str | None = None) -> dict[str, Any]:
        """Create an experiment (or an RLSweep, from its manifest) from a manifest file, a dict, an
        RLExperiment or an AlgorithmConfig (after --set style `overrides`); validated first (ManifestError
        naming each field). Returns the object."""
        doc, resource = prepare(source, overrides, namespace=namespace or self.namespace,
                                namespace_given=namespace is not None or self.connection.namespace_given)
        ns = doc["metadata"]["namespace"]
        kind = SWEEP if resource.kind == SWEEP.kind else EXPERIMENT
        # Strict: a field the CRD does not know is refused instead of pruned (Kubernetes >= 1.25; an older
        # API server ignores the parameter, and the validation above has refused such a field already).
        created: dict[str, Any] = self._call(kind.what(resource.name), ns, self.custom.create_namespaced_custom_object,
                                             GROUP, VERSION, ns, kind.plural, doc, field_validation=FIELD_VALIDATION)
        return created

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._get(EXPERIMENT, name, namespace)

    def list(self, *, all_namespaces: bool = False, namespace: str | None = None) -> Objects:
        return self._list(EXPERIMENT, all_namespaces, namespace)

    def delete(self, name: str, namespace: str | None = None, *, wait: float | None = None) -> None:
        """Delete the experiment (its pods and other children go with it; its storage stays). With `wait`,
        return only once it is gone (WaitTimeout after that many seconds)."""
        self._delete(EXPERIMENT, name, namespace, wait)

    def events(self, name: str, namespace: str | None = None) -> Objects:
        """The experiment's Events, oldest first (each as the API server stores it)."""
        return self._events(EXPERIMENT, name, namespace)

    def status(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """Name, algorithm, env, the stored status (phase, conditions, progress, last checkpoint, attempt)
        and the recent events, as `kuberl status -o json` prints them."""
        return status_document(self.get(name, namespace), self.events(name, namespace))

    def recent_events(self, name: str, namespace: str | None = None) -> Objects:
        return recent_events(self.events(name, namespace))

    def wait(self, name: str, *, timeout: float | None = None, phases: frozenset[str] | set[str] = TERMINAL_PHASES,
             namespace: str | None = None, interval: float = 1.0, on_change: Waited | None = None) -> dict[str, Any]:
        """Poll until the phase is one of `phases` (Succeeded or Failed by default); the experiment.
        `on_change` sees the status each time phase or progress changes. WaitTimeout after `timeout`."""
        return self._wait(EXPERIMENT, name, ("phase", "attempt", "iteration"), timeout=timeout, phases=phases,
                          namespace=namespace, interval=interval, on_change=on_change)

    # -- sweeps ---------------------------------------------------------------------------------------
    def get_sweep(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._get(SWEEP, name, namespace)

    def list_sweeps(self, *, all_namespaces: bool = False, namespace: str | None = None) -> Objects:
        return self._list(SWEEP, all_namespaces, namespace)

    def delete_sweep(self, name: str, namespace: str | None = None, *, wait: float | None = None) -> None:
        """Delete the sweep; its trials' RLExperiments (and their pods) go with it, their storage stays."""
        self._delete(SWEEP, name, namespace, wait)

    def sweep_events(self, name: str, namespace: str | None = None) -> Objects:
        return self._events(SWEEP, name, namespace)

    def sweep_status(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """Name, search, objective, the stored status (phase, trial counts, best trial, every trial) and the
        recent events, as `kuberl status sweep/NAME -o json` prints them."""
        return sweep_status_document(self.get_sweep(name, namespace), self.sweep_events(name, namespace))

    def wait_sweep(self, name: str, *, timeout: float | None = None,
                   phases: frozenset[str] | set[str] = TERMINAL_PHASES, namespace: str | None = None,
                   interval: float = 2.0, on_change: Waited | None = None) -> dict[str, Any]:
        """Poll until the sweep's phase is one of `phases` (Succeeded or Failed by default); the sweep.
        `on_change` sees the status each time the phase, a trial count or the best value changes."""
        return self._wait(SWEEP, name, ("phase", "trialsSucceeded", "trialsRunning", "trialsPruned", "trialsFailed",
                                        "best"), timeout=timeout, phases=phases, namespace=namespace,
                          interval=interval, on_change=on_change)

    def sweep_trials(self, name: str, namespace: str | None = None, *, trial: int | None = None) -> Objects:
        """The RLExperiments the sweep runs as its trials (only trial `trial`'s with it), oldest first."""
        ns = namespace or self.namespace
        selector = f"{APP_LABEL}={APP_NAME},{SWEEP_LABEL}={names.experiment_label(name)}"
        if trial is not None:
            selector += f",{TRIAL_LABEL}={trial}"
        found = self._call(f"the trials of {SWEEP.what(name)}", ns, self.custom.list_namespaced_custom_object,
                           GROUP, VERSION, ns, EXPERIMENT.plural, label_selector=selector)
        items = list(found.get("items") or [])
        return sorted(items, key=lambda o: (o["metadata"].get("creationTimestamp") or "", o["metadata"]["name"]))

    def kinds_named(self, name: str, namespace: str | None = None) -> Kinds:
        """Which of RLExperiment and RLSweep have an object called `name` in the namespace. A kind that RBAC
        hides counts as absent, unless both are hidden (Forbidden)."""
        found: Kinds = []
        refused: Forbidden | None = None
        for kind in (EXPERIMENT, SWEEP):
            try:
                if self._exists(kind, name, namespace or self.namespace):
                    found.append(kind)
            except Forbidden as exc:
                refused = refused or exc
        if refused is not None and not found:
            raise refused
        return found

    def resolve(self, target: str, namespace: str | None = None) -> tuple[Kind, str]:
        """The kind and name of `sweep/NAME`, `rlexperiment/NAME` (...), or of a bare NAME: the one kind that
        has it (NotFound when neither does, Ambiguous when both do)."""
        kind, name = parse_reference(target)
        if kind is not None:
            return kind, name
        ns = namespace or self.namespace
        found = self.kinds_named(name, ns)
        if not found:
            raise NotFound(f"rlexperiment or rlsweep {name!r} not found in namespace {ns!r}")
        if len(found) > 1:
            raise Ambiguous(f"both an rlexperiment and an rlsweep are named {name!r} in namespace {ns!r}: say which, "
                            f"as experiment/{name} or sweep/{name}")
        return found[0], name

    # -- pods -----------------------------------------------------------------------------------------
    def head_pod(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The head pod as stored, or None when there is none (not yet, or no longer)."""
        ns = namespace or self.namespace
        try:
            response = self._call(f"pod {names.head_name(name)!r}", ns, self.core.read_namespaced_pod,
                                  names.head_name(name), ns, _preload_content=False)
        except NotFound:
            return None
        pod: dict[str, Any] = json.loads(response.data)
        return pod

    def pod_log(self, name: str, *, follow: bool = False, tail: int | None = None,
                namespace: str | None = None) -> Iterator[str]:
        """The head pod's log through the API (streamed with `follow`); ClientError when it cannot be read."""
        ns = namespace or self.namespace
        pod = names.head_name(name)
        extra: dict[str, Any] = {"tail_lines": tail} if tail is not None else {}
        response = self._call(f"the log of pod {pod!r}", ns, self.core.read_namespaced_pod_log, pod, ns,
                              container=HEAD_CONTAINER, follow=follow, _preload_content=False,
                              _request_timeout=None if follow else REQUEST_TIMEOUT, **extra)
        return _decoded(response)

    # -- the run's storage ----------------------------------------------------------------------------
    def run_uri(self, name: str, namespace: str | None = None) -> str:
        return runs.run_uri(self.get(name, namespace))

    def open_run(self, name: str, *, endpoint: str | None = None, namespace: str | None = None) -> ObjectStore:
        """The experiment's run in its storage, at `endpoint` (default spec.storage.endpoint)."""
        obj = self.get(name, namespace)
        storage = (obj.get("spec") or {}).get("storage") or {}
        return runs.open_run(runs.run_uri(obj), endpoint=endpoint or storage.get("endpoint"),
                             region=storage.get("region"))

    def results(self, name: str, *, endpoint: str | None = None, namespace: str | None = None) -> Objects:
        """results.jsonl: one dict per training iteration."""
        return runs.read_results(self.open_run(name, endpoint=endpoint, namespace=namespace))

    def checkpoints(self, name: str, *, endpoint: str | None = None,
                    namespace: str | None = None) -> Checkpoints:
        return runs.list_checkpoints(self.open_run(name, endpoint=endpoint, namespace=namespace))

    def download_checkpoint(self, name: str, directory: str | Path, *, iteration: int | None = None,
                            endpoint: str | None = None, namespace: str | None = None) -> Path:
        """The newest complete checkpoint (or `iteration`'s) copied under `directory`, verified."""
        return runs.download_checkpoint(self.open_run(name, endpoint=endpoint, namespace=namespace), directory,
                                        iteration)

    def stored_log(self, name: str, *, attempt: int | None = None, endpoint: str | None = None,
                   namespace: str | None = None) -> StoredLog | None:
        """The trainer's output as the run's storage keeps it (the newest attempt by default)."""
        return runs.stored_log(self.open_run(name, endpoint=endpoint, namespace=namespace), attempt)

    # -- helpers --------------------------------------------------------------------------------------
    def _get(self, kind: Kind, name: str, namespace: str | None) -> dict[str, Any]:
        ns = namespace or self.namespace
        obj: dict[str, Any] = self._call(kind.what(name), ns, self.custom.get_namespaced_custom_object, GROUP,
                                         VERSION, ns, kind.plural, name)
        return obj

    def _list(self, kind: Kind, all_namespaces: bool, namespace: str | None) -> Objects:
        if all_namespaces:
            found = self._call(kind.plural, None, self.custom.list_cluster_custom_object, GROUP, VERSION, kind.plural)
        else:
            ns = namespace or self.namespace
            found = self._call(kind.plural, ns, self.custom.list_namespaced_custom_object, GROUP, VERSION, ns,
                               kind.plural)
        # A List's items may leave out apiVersion and kind; printed as a mixed List they must say which.
        return [{"apiVersion": API_VERSION, "kind": kind.kind, **item} for item in found.get("items") or []]

    def _delete(self, kind: Kind, name: str, namespace: str | None, wait: float | None) -> None:
        ns = namespace or self.namespace
        self._call(kind.what(name), ns, self.custom.delete_namespaced_custom_object, GROUP, VERSION, ns, kind.plural,
                   name, body={"propagationPolicy": "Background"})
        if wait is not None:
            self._until(lambda: not self._exists(kind, name, ns), wait,
                        f"{kind.what(name)} in namespace {ns!r} to be deleted")

    def _events(self, kind: Kind, name: str, namespace: str | None) -> Objects:
        ns = namespace or self.namespace
        selector = f"involvedObject.name={name},involvedObject.kind={kind.kind}"
        response = self._call(f"the events of {kind.what(name)}", ns, self.core.list_namespaced_event, ns,
                              field_selector=selector, _preload_content=False)
        items = json.loads(response.data).get("items") or []
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name
                and (e.get("involvedObject") or {}).get("kind") in (None, kind.kind)]

    def _wait(self, kind: Kind, name: str, watched: tuple[str, ...], *, timeout: float | None,
              phases: frozenset[str] | set[str], namespace: str | None, interval: float,
              on_change: Waited | None) -> dict[str, Any]:
        ns = namespace or self.namespace
        deadline = None if timeout is None else time.monotonic() + timeout
        last: list[Any] | None = None
        while True:
            obj = self._get(kind, name, ns)
            status = obj.get("status") or {}
            seen = [status.get(key) for key in watched]
            if on_change is not None and seen != last:
                on_change(status)
            last = seen
            if status.get("phase") in phases:
                return obj
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"{kind.what(name)} in namespace {ns!r} is still "
                                  f"{status.get('phase') or Phase.PENDING.value} after {timeout:g} s")
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))

    def _exists(self, kind: Kind, name: str, namespace: str) -> bool:
        try:
            self._get(kind, name, namespace)
        except NotFound:
            return False
        return True

    def _until(self, done: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(interval)

    def _call(self, what: str, namespace: str | None, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        try:
            return method(*args, **kwargs)
        except ApiException as exc:
            raise from_api_error(exc, what, namespace) from None
        except (HTTPError, OSError) as exc:
            raise from_api_error(exc, what, namespace) from None


def _decoded(response: Any) -> Iterator[str]:
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        for data in response.stream(4096, decode_content=True):
            text = decoder.decode(data)
            if text:
                yield text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
    finally:
        response.release_conn()


__all__ = ["Client", "ClientError"]
