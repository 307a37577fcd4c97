"""The real control plane as an e2e cluster (E2E_CLUSTER=control-plane): etcd, kube-apiserver,
kube-controller-manager and kube-scheduler v1.20.2 (`make control-plane`), the pod runner as the
one node, the chart applied for real, and the operator on its ServiceAccount's token.

What differs from the stand-in (whose scenario helpers it shares): the API is Kubernetes itself,
so RBAC, admission, the scheduler, garbage collection and graceful deletion are real. The pod runner
holds a node's identity (system:node:NAME), registers its Node, heartbeats a Lease, and runs only the
pods the scheduler binds to it. The chart is rendered by `helm template`; its CRDs, RBAC,
ServiceAccount and peering object are applied, and the operator runs as a local process (not the
chart's Deployment) with a TokenRequest token for the chart's ServiceAccount, never the admin's
credentials: a rule missing from the chart's Role fails a scenario.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl_testing import helm_chart
from kuberl_testing.controlplane import ControlPlane
from kuberl_testing.podrunner import PodRunner, RunnerOptions, api_client_from_kubeconfig
from kuberl_testing.podrunner.node import NodeAgent
from kuberl_testing.s3server import S3Server
from kuberl_testing.standin import BUCKET, POD_ENV, StandInCluster

NODE_NAME = "pod-runner"
KUBECTL = helm_chart.ROOT / ".tools" / "bin" / "kubectl"
# What a cluster runs from the chart that this backend replaces by local processes.
NOT_APPLIED = {"Deployment", "Service", "ServiceMonitor"}
TOKEN_SECONDS = 4 * 3600


class ControlPlaneCluster(StandInCluster):
    kind = "control-plane"

    def __init__(self, work_dir: Path):
        super().__init__(work_dir)
        self.plane: ControlPlane | None = None
        self.node: NodeAgent | None = None
        self.operator_account: tuple[str, str] = ("", "")  # namespace, name
        # (began, its authorizer ready) in epoch seconds, for each restart of the apiserver
        self.apiserver_restarts: list[tuple[float, float]] = []

    # -- what scenarios use beyond the stand-in's --

    @property
    def api_client(self) -> k8s.ApiClient:
        """The admin's client (the tests' view; the operator never has it)."""
        return api_client_from_kubeconfig(str(self.kubeconfig))

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """kubectl as the admin."""
        result = subprocess.run([str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr}{result.stdout}")
        return result

    @property
    def operator_user(self) -> str:
        return f"system:serviceaccount:{self.operator_account[0]}:{self.operator_account[1]}"

    def audit(self, **match: str) -> list[dict[str, Any]]:
        """Completed requests from the API server's audit log whose fields match: user, verb,
        resource, namespace, name, code (e.g. audit(user=..., verb="create", resource="pods"))."""
        assert self.plane is not None
        if not self.plane.audit_log.exists():
            return []
        found = []
        with self.plane.audit_log.open(errors="replace") as log:
            for line in log:
                entry = json.loads(line)
                ref = entry.get("objectRef") or {}
                fields = {"user": entry["user"].get("username"), "verb": entry.get("verb"),
                          "resource": ref.get("resource"), "subresource": ref.get("subresource"),
                          "namespace": ref.get("namespace"), "name": ref.get("name"),
                          "code": str((entry.get("responseStatus") or {}).get("code"))}
                if entry.get("stage") == "ResponseComplete" and all(fields[k] == v for k, v in match.items()):
                    found.append(entry)
        return found

    def forbidden_requests(self, user: str) -> list[str]:
        """What the authorizer refused `user` (403s other than admission's), from the audit log; but while a
        restarted apiserver's RBAC authorizer had not loaded the roles yet, when it refuses everyone."""
        return [f"{e['verb']} {e['requestURI']}" for e in self.audit(user=user, code="403")
                if (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
                and not self._restarting(e["requestReceivedTimestamp"])]

    def _restarting(self, stamp: str) -> bool:
        moment = datetime.datetime.fromisoformat(stamp).timestamp()
        return any(began <= moment <= ready for began, ready in self.apiserver_restarts)

    def kill_and_restart_operator(self) -> None:
        """SIGKILL the operator, as a crash or an OOM kill would (no shutdown: its peering record stays until
        it expires, and the new one waits for that), and start a new one."""
        assert self._operator is not None
        self._operator.kill()
        self._operator.wait(10)
        self._start_operator()

    def restart_apiserver(self) -> None:
        """Restart kube-apiserver with the same flags, port, certificates and etcd data; back once /readyz
        answers. Every watch and client connection to it breaks meanwhile."""
        assert self.plane is not None
        began = time.time()
        self.plane.restart("kube-apiserver")
        # kube-apiserver 1.20 serves requests before its RBAC authorizer has read the roles, and for a moment
        # refuses everyone (`clusterrole ... not found`): the restart lasts until the operator's own reads pass.
        custom = k8s.CustomObjectsApi(api_client_from_kubeconfig(str(self.operator_kubeconfig)))
        deadline = time.monotonic() + 60
        while True:
            try:
                custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, limit=1)
                break
            except k8s.ApiException as exc:
                if exc.status != 403 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.apiserver_restarts.append((began, time.time()))

    def diagnostics(self, namespace: str, lines: int = 40) -> str:
        text = super().diagnostics(namespace, lines)
        if self.node is not None and self.node.errors:
            text += "\nnode heartbeat errors:\n" + "\n".join(self.node.errors[-5:])
        if forbidden := self.forbidden_requests(self.operator_user):
            text += "\nthe operator's requests refused by RBAC (audit log):\n" + "\n".join(forbidden[-5:])
        if warnings := self.warning_events(namespace):
            text += "\nWarning events:\n" + "\n".join(warnings[-5:])
        return text

    def warning_events(self, namespace: str) -> list[str]:
        """The namespace's Warning events, oldest first: the operator's reasons (a refused create names why)."""
        try:
            events = k8s.CoreV1Api(self.api_client).list_namespaced_event(namespace).items
        except Exception as exc:  # noqa: BLE001 - diagnostics of a failure: say what could not be read
            return [f"(events unreadable: {exc})"]
        return [f"{e.involved_object.name}: {e.reason}: {e.message}" for e in events if e.type == "Warning"]

    # -- lifecycle --

    def _start(self) -> ControlPlaneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.plane = ControlPlane(self.work_dir / "control-plane").start()
        self.kubeconfig = self.plane.kubeconfig
        self.s3 = S3Server().start()
        self.s3.create_bucket(BUCKET)
        api = self.api_client
        self.operator_account = self._install_chart()
        self._start_node()
        self._prepare_namespace(k8s.CoreV1Api(api))
        self.operator_kubeconfig = self._token_kubeconfig(*self.operator_account)
        self._start_operator()
        return self

    def stop(self) -> None:
        super().stop()
        if self.node is not None:
            self.node.stop()
        if self.plane is not None:
            self.plane.stop()
            print(f"\ncontrol plane logs: {self.plane.work_dir / 'logs'}")

    def _install_chart(self) -> tuple[str, str]:
        """Apply what the chart installs but the Deployment and its Service: CRDs first (the peering
        object's kind comes with them), then the rest. Returns the operator's ServiceAccount."""
        documents = [d for d in helm_chart.render() if d["kind"] not in NOT_APPLIED]
        crds = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
        rest = [d for d in documents if d["kind"] != "CustomResourceDefinition"]
        self.kubectl("create", "namespace", helm_chart.RELEASE_NAMESPACE)
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(crds))
        wait_established(lambda *args: self.kubectl(*args).stdout, [d["metadata"]["name"] for d in crds])
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rest))
        account = next(d for d in rest if d["kind"] == "ServiceAccount")
        return account["metadata"].get("namespace", helm_chart.RELEASE_NAMESPACE), account["metadata"]["name"]

    def _start_node(self) -> None:
        assert self.plane is not None
        node_api = api_client_from_kubeconfig(str(self.plane.kubeconfig_for(f"system:node:{NODE_NAME}",
                                                                            ("system:nodes",))))
        self.node = NodeAgent(node_api, NODE_NAME).start()
        self.runner = PodRunner(node_api, RunnerOptions(
            work_dir=self.work_dir / "pods", fixed_ports={self.status_port: self.status_port}, extra_env=POD_ENV,
            unpullable_images=re.escape(self.unpullable_image), node_name=NODE_NAME)).start()

    def _prepare_namespace(self, core: k8s.CoreV1Api) -> None:
        super()._prepare_namespace(core)
        # The ServiceAccount admission plugin refuses pods until the namespace's `default` account exists.
        deadline = time.monotonic() + 60
        while not core.list_namespaced_service_account(self.namespace, field_selector="metadata.name=default").items:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no default ServiceAccount in {self.namespace} after 60 s")
            time.sleep(0.2)

    def _token_kubeconfig(self, namespace: str, account: str) -> Path:
        """A kubeconfig with a TokenRequest token for the ServiceAccount and nothing else."""
        assert self.plane is not None
        request = k8s.CoreV1Api(self.api_client).create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": TOKEN_SECONDS}})
        ca = base64.b64encode((self.plane.work_dir / "pki" / "ca.crt").read_bytes()).decode()
        user = f"{namespace}-{account}"
        config: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Config", "current-context": user,
            "clusters": [{"name": "kuberl", "cluster": {"server": self.plane.server, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": request.status.token}}],
            "contexts": [{"name": user, "context": {"cluster": "kuberl", "user": user}}]}
        path = self.work_dir / "operator.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path


def wait_established(kubectl: Callable[..., str], names: list[str], timeout: float = 60.0) -> None:
    """Until every named CRD is Established (`kubectl wait` fails outright on a CRD so new that it
    has no status.conditions yet)."""
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(kubectl("get", "crd", *names, "-o", "json"))
        items = listed.get("items", [listed])
        established = {item["metadata"]["name"] for item in items
                       if any(c.get("type") == "Established" and c.get("status") == "True"
                              for c in (item.get("status") or {}).get("conditions") or [])}
        if established >= set(names):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRDs not Established in {timeout:.0f} s: {sorted(set(names) - established)}")
        time.sleep(0.2)
