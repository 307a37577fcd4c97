"""`Client`: RLExperiments through the Kubernetes API, for notebooks and for `kuberl`'s cluster commands.

    from kuberl.client import Client
    client = Client()                      # the current kubeconfig context and its namespace
    client.submit("examples/cartpole-ppo.yaml", overrides=["storage.uri=s3://bucket/runs"])
    client.wait("cartpole-ppo", timeout=3600)
    client.results("cartpole-ppo")[-1]["episodeReturnMean"]

Every failure is a ClientError (kuberl.client.errors) naming the experiment and the namespace; a bad
manifest is a ManifestError naming the field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.api.contract import HEAD_ROLE
from kuberl.api.sweep_types import KIND as SWEEP_KIND
from kuberl.api.sweep_types import PLURAL as SWEEP_PLURAL
from kuberl.api.types import GROUP, KIND, PLURAL, TERMINAL_PHASES, VERSION, Phase
from kuberl.client import runs
from kuberl.client.connection import Connection, connect
from kuberl.client.errors import ClientError, NotFound, WaitTimeout, from_api_error
from kuberl.client.formatting import recent_events, status_document
from kuberl.client.manifests import ManifestSource, prepare
from kuberl.operator import names

if TYPE_CHECKING:
    from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
    from kuberl.trainer.storage.logs import StoredLog

REQUEST_TIMEOUT = (10.0, 60.0)  # connect, read: an unreachable server fails in seconds, not minutes
HEAD_CONTAINER = HEAD_ROLE  # the head pod's one container (operator/builders/pod.py)


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
        plural = SWEEP_PLURAL if resource.kind == SWEEP_KIND else PLURAL
        return self._call(f"{resource.kind.lower()} {resource.name!r}", ns,
                          self.custom.create_namespaced_custom_object, GROUP, VERSION, ns, plural, doc)

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        ns = namespace or self.namespace
        return self._call(_what(name), ns, self.custom.get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name)

    def list(self, *, all_namespaces: bool = False, namespace: str | None = None) -> list[dict[str, Any]]:
        if all_namespaces:
            found = self._call("rlexperiments", None, self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        else:
            ns = namespace or self.namespace
            found = self._call("rlexperiments", ns, self.custom.list_namespaced_custom_object,
                               GROUP, VERSION, ns, PLURAL)
        return list(found.get("items") or [])

    def delete(self, name: str, namespace: str | None = None, *, wait: float | None = None) -> None:
        """Delete the experiment (its pods and other children go with it; its storage stays). With `wait`,
        return only once it is gone (WaitTimeout after that many seconds)."""
        ns = namespace or self.namespace
        self._call(_what(name), ns, self.custom.delete_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
                   body={"propagationPolicy": "Background"})
        if wait is not None:
            self._until(lambda: not self._exists(name, ns), wait, f"{_what(name)} in namespace {ns!r} to be deleted")

    def events(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The experiment's Events, oldest first (each as the API server stores it)."""
        ns = namespace or self.namespace
        selector = f"involvedObject.name={name},involvedObject.kind={KIND}"
        response = self._call(f"the events of {_what(name)}", ns, self.core.list_namespaced_event, ns,
                              field_selector=selector, _preload_content=False)
        items = json.loads(response.data).get("items") or []
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]

    def status(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """Name, algorithm, env, the stored status (phase, conditions, progress, last checkpoint, attempt)
        and the recent events, as `kuberl status -o json` prints them."""
        return status_document(self.get(name, namespace), self.events(name, namespace))

    def recent_events(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return recent_events(self.events(name, namespace))

    def wait(self, name: str, *, timeout: float | None = None, phases: frozenset[str] | set[str] = TERMINAL_PHASES,
             namespace: str | None = None, interval: float = 1.0,
             on_change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Poll until the phase is one of `phases` (Succeeded or Failed by default); the experiment.
        `on_change` sees the status each time phase or progress changes. WaitTimeout after `timeout`."""
        ns = namespace or self.namespace
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[Any, ...] | None = None
        while True:
            obj = self.get(name, ns)
            status = obj.get("status") or {}
            seen = (status.get("phase"), status.get("attempt"), status.get("iteration"))
            if on_change is not None and seen != last:
                on_change(status)
            last = seen
            if status.get("phase") in phases:
                return obj
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"{_what(name)} in namespace {ns!r} is still {status.get('phase') or Phase.PENDING.value} "
                                  f"after {timeout:g} s")
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))

    # -- pods -----------------------------------------------------------------------------------------
    def head_pod(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The head pod as stored, or None when there is none (not yet, or no longer)."""
        ns = namespace or self.namespace
        try:
            response = self._call(f"pod {names.head_name(name)!r}", ns, self.core.read_namespaced_pod,
                                  names.head_name(name), ns, _preload_content=False)
        except NotFound:
            return None
        return json.loads(response.data)

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

    def results(self, name: str, *, endpoint: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
        """results.jsonl: one dict per training iteration."""
        return runs.read_results(self.open_run(name, endpoint=endpoint, namespace=namespace))

    def checkpoints(self, name: str, *, endpoint: str | None = None,
                    namespace: str | None = None) -> list[CheckpointInfo]:
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
    def _exists(self, name: str, namespace: str) -> bool:
        try:
            self.get(name, namespace)
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


def _what(name: str) -> str:
    return f"rlexperiment {name!r}"


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
