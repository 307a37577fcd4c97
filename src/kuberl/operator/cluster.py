"""The operator's narrow view of the Kubernetes API, through the official `kubernetes` client.

Reads return plain JSON dicts (the API's own camelCase), so the pure functions of `status/` and
`builders/` never see client model classes. Writes are idempotent: creating what exists and
deleting what is gone are not errors. The client is synchronous; callers run it in threads.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from collections.abc import Callable
from typing import Any

import kubernetes
from kubernetes.client import ApiClient, ApiException

from kuberl.api.types import GROUP, PLURAL, VERSION

MERGE_PATCH = "application/merge-patch+json"
EVENT_SOURCE = "kuberl-operator"
MAX_EVENT_MESSAGE = 1024
# (connect, read) seconds for each API request. Without a limit, a request whose connection the API server or a
# load balancer drops silently blocks its thread for ever, and the experiment it reconciles with it.
REQUEST_TIMEOUT = (10.0, 60.0)


class TimedApiClient(ApiClient):  # type: ignore[misc]  # the kubernetes client has no type hints
    """An API client whose requests time out (`request_timeout`) unless the call sets its own `_request_timeout`."""

    def __init__(self, configuration: kubernetes.client.Configuration,
                 request_timeout: tuple[float, float] = REQUEST_TIMEOUT):
        super().__init__(configuration)
        self.request_timeout = request_timeout

    def call_api(self, *args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return super().call_api(*args, _request_timeout=_request_timeout or self.request_timeout, **kwargs)


def load_api_client(pool_size: int = 16, request_timeout: tuple[float, float] = REQUEST_TIMEOUT) -> ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig ($KUBECONFIG or ~/.kube/config).

    `pool_size` should match the threads that call the client: urllib3 otherwise opens and
    discards a connection per request beyond its default pool of 5 per CPU.
    """
    configuration = kubernetes.client.Configuration()
    configuration.connection_pool_maxsize = pool_size
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                           client_configuration=configuration)
    return TimedApiClient(configuration, request_timeout)


class Rejected(Exception):
    """The API server refused to create a child for a reason no retry fixes (invalid, forbidden)."""


class QuotaExceeded(Exception):
    """A ResourceQuota forbids the child for now; the message is the API server's (it names the quota)."""


# 400, 403 and 422 are the user's or the platform's to fix, and no retry helps; two 403s are exceptions.
_REJECTED = (400, 403, 422)
# A quota's 403 passes once the quota frees up (QuotaExceeded). The OwnerReferencesPermissionEnforcement admission
# plugin (OpenShift) refuses a child while the API server's map of resources does not know the RLExperiment CRD,
# installed moments before; the map is refreshed within seconds, and a retry then passes.
_STALE_OWNER_MAPPING = "cannot find RESTMapping"


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def _json(response: Any) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(response.data)
    return obj


POD_GROUPS = "podgroups"


def _or_none(read: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """A read's object, or None when it does not exist."""
    try:
        return _json(read(*args, _preload_content=False))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class Cluster:
    def __init__(self, api: ApiClient):
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.networking = kubernetes.client.NetworkingV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)

    # -- reads --

    def experiment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _or_none(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = _json(self.core.list_namespaced_pod(namespace, label_selector=selector,
                                                                          _preload_content=False))["items"]
        return items

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _or_none(self.core.read_namespaced_secret, name, namespace)

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _or_none(self.core.read_namespaced_config_map, name, namespace)

    def pod_group(self, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        group, version = _group_version(api_version)
        return _or_none(self.custom.get_namespaced_custom_object, group, version, namespace, POD_GROUPS, name)

    # -- writes --

    def patch_pod_group_spec(self, api_version: str, namespace: str, name: str, spec: dict[str, Any]) -> None:
        group, version = _group_version(api_version)
        self.custom.patch_namespaced_custom_object(group, version, namespace, POD_GROUPS, name, {"spec": spec},
                                                   _content_type=MERGE_PATCH, _preload_content=False)

    def create(self, body: dict[str, Any]) -> bool:
        """Create a child; False when it already exists (a repeated reconcile makes nothing twice)."""
        namespace, kind = body["metadata"]["namespace"], body["kind"]
        creators = {
            "Pod": self.core.create_namespaced_pod,
            "Service": self.core.create_namespaced_service,
            "ConfigMap": self.core.create_namespaced_config_map,
            "Secret": self.core.create_namespaced_secret,
            "NetworkPolicy": self.networking.create_namespaced_network_policy,
            "PodGroup": self._create_pod_group,
        }
        try:
            creators[kind](namespace, body, _preload_content=False)
        except ApiException as exc:
            if exc.status == 409:
                return False
            message = _api_message(exc)
            if exc.status == 404 and kind == "PodGroup":  # the gang scheduler (its CRD) is not installed
                raise Rejected(f"PodGroup {body['metadata']['name']!r}: the API {body['apiVersion']} is not "
                               "installed; install the gang scheduler or drop spec.scheduling.gang") from None
            if exc.status == 403 and "exceeded quota" in message:
                raise QuotaExceeded(message) from None
            if exc.status == 403 and _STALE_OWNER_MAPPING in message:
                raise  # the pass fails and is retried with backoff
            if exc.status in _REJECTED:
                raise Rejected(f"{kind} {body['metadata']['name']!r} refused by the API server "
                               f"({exc.status}): {message}") from None
            raise
        return True

    def _create_pod_group(self, namespace: str, body: dict[str, Any], **kwargs: Any) -> Any:
        group, version = _group_version(body["apiVersion"])
        return self.custom.create_namespaced_custom_object(group, version, namespace, POD_GROUPS, body, **kwargs)

    def replace_config_map_data(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.core.patch_namespaced_config_map(name, namespace, {"data": data}, _content_type=MERGE_PATCH,
                                              _preload_content=False)

    def delete_pod(self, namespace: str, name: str) -> bool:
        try:
            self.core.delete_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def post_event(self, body: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event about the experiment `body`. Written here rather than by kopf.event(), which
        needs the context of a Kopf handler: a pass that the poll loop starts would lose its events."""
        meta = body["metadata"]
        stamp = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "type": type_, "reason": reason, "message": message[:MAX_EVENT_MESSAGE],
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "source": {"component": EVENT_SOURCE}, "reportingComponent": EVENT_SOURCE,
            "reportingInstance": socket.gethostname(),
        }
        self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False)

    def patch_experiment_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status},
            _content_type=MERGE_PATCH, _preload_content=False)

    def patch_experiment_annotations(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"annotations": annotations}},
            _content_type=MERGE_PATCH, _preload_content=False)

    def remove_experiment_finalizer(self, namespace: str, name: str, finalizer: str) -> None:
        body = self.experiment(namespace, name)
        if body is None:
            return
        finalizers = body["metadata"].get("finalizers") or []
        if finalizer in finalizers:
            # A JSON patch that tests the list first, so that a concurrent change to it is not overwritten.
            patch = [{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                     {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in finalizers if f != finalizer]}]
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch,
                                                       _content_type="application/json-patch+json",
                                                       _preload_content=False)
