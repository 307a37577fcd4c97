"""The pod runner as a node of a real API server: a Node object kept Ready, as a kubelet keeps it.

`NodeAgent` registers the Node (capacity, a Ready condition, the loopback address), then renews its
Lease in kube-node-lease (the node lifecycle controller's heartbeat) and refreshes the Node's status
conditions from a thread until `stop()`. Run it with the node's own identity
(user system:node:NAME in group system:nodes) so that the Node authorizer decides what it may do.
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kuberl_testing.podrunner.loop import LoopThread

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40  # the kubelet's default; the controller marks a node unknown after it runs out
CAPACITY = {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "100Gi"}


def _now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _conditions(since: str) -> list[dict[str, Any]]:
    beat = _stamp(_now())
    healthy = [("MemoryPressure", "KubeletHasSufficientMemory"), ("DiskPressure", "KubeletHasNoDiskPressure"),
               ("PIDPressure", "KubeletHasSufficientPID")]
    conditions = [{"type": kind, "status": "False", "reason": reason, "message": "the pod runner's node",
                   "lastHeartbeatTime": beat, "lastTransitionTime": since} for kind, reason in healthy]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "the pod runner is posting ready status", "lastHeartbeatTime": beat,
                       "lastTransitionTime": since})
    return conditions


def node_body(name: str, address: str, since: str) -> dict[str, Any]:
    """The Node as registered: schedulable, Ready, with room for every test pod."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "kubernetes.io/arch": "amd64", "kuberl.io/pod-runner": "true"}},
        "spec": {},
        "status": {"capacity": CAPACITY, "allocatable": CAPACITY, "conditions": _conditions(since),
                   "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
                   "nodeInfo": {"kubeletVersion": "v1.20.2-kuberl-pod-runner", "operatingSystem": "linux",
                                "architecture": "amd64", "containerRuntimeVersion": "kuberl-pod-runner://1"}},
    }


class NodeAgent:
    """Registers node `name` and keeps it Ready (Lease every `heartbeat_seconds`, status every 4th beat)."""

    def __init__(self, api_client: k8s.ApiClient, name: str, address: str = "127.0.0.1",
                 heartbeat_seconds: float = 5.0):
        self.name = name
        self.address = address
        self.heartbeat_seconds = heartbeat_seconds
        self._core = k8s.CoreV1Api(api_client)
        self._leases = k8s.CoordinationV1Api(api_client)
        self._since = _stamp(_now())
        self._loop = LoopThread(self._run, name=f"node-{self.name}")
        self.errors: list[str] = []
        self.beats = 0

    def start(self) -> NodeAgent:
        self._register()
        self._renew_lease()
        self._loop.start()
        return self

    def stop(self) -> None:
        self._loop.stop()

    def _register(self) -> None:
        body = node_body(self.name, self.address, self._since)
        try:
            node = self._core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            node = self._core.read_node(self.name)
            self._core.patch_node_status(self.name, {"status": body["status"]})
        self._node_uid = node.metadata.uid

    def _run(self) -> None:
        while not self._loop.stopping.wait(self.heartbeat_seconds):
            try:
                self._renew_lease()
                self.beats += 1
                if self.beats % 4 == 0:
                    self._core.patch_node_status(self.name, {"status": {"conditions": _conditions(self._since)}})
            except Exception as exc:  # the API may be away a moment; the next beat tries again
                self.errors.append(repr(exc))
                del self.errors[:-20]

    def _renew_lease(self) -> None:
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro(_now())}
        try:
            self._leases.patch_namespaced_lease(self.name, LEASE_NAMESPACE, {"spec": spec})
        except ApiException as exc:
            if exc.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}
            self._leases.create_namespaced_lease(LEASE_NAMESPACE, {
                "metadata": {"name": self.name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": spec})
