"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, with generated certificates and an admin kubeconfig. No kubelet: a test's pod
runner registers as the node.

    with ControlPlane(tmp_path / "cp") as plane:
        subprocess.run(["kubectl", "--kubeconfig", plane.kubeconfig, "get", "ns"])
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from kuberl_testing.controlplane import processes
from kuberl_testing.controlplane.binaries import find_binaries, supports_flag
from kuberl_testing.controlplane.pki import CertificateAuthority, KeyPair, service_account_signing_key
from kuberl_testing.controlplane.processes import Started
from kuberl_testing.ports import free_port

HOST = "127.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service's address, the first of SERVICE_CIDR
ISSUER = "https://kubernetes.default.svc.cluster.local"
# kube-apiserver 1.20's default admission plugins, named so that the process's flags say it, and one more
ADMISSION_PLUGINS = (
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "TaintNodesByCondition", "Priority",
    "DefaultTolerationSeconds", "DefaultStorageClass", "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize", "RuntimeClass", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "DefaultIngressClass", "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook", "ResourceQuota",
    # not a default: OpenShift's, so that the operator's ownerReferences (blockOwnerDeletion) need the chart's grant
    "OwnerReferencesPermissionEnforcement",
)
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}
STATE_FILE = "control-plane.json"
READY_TIMEOUT = float(os.environ.get("KUBERL_CONTROL_PLANE_READY_SECONDS", "180"))


class ControlPlaneError(RuntimeError):
    """A component did not start or did not become ready."""


def _kubeconfig(server: str, ca: Path, user: str, client: KeyPair) -> dict[str, Any]:
    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {"apiVersion": "v1", "kind": "Config", "current-context": user,
            "clusters": [{"name": "kuberl-control-plane",
                          "cluster": {"server": server, "certificate-authority-data": data(ca)}}],
            "users": [{"name": user, "user": {"client-certificate-data": data(client.cert),
                                              "client-key-data": data(client.key)}}],
            "contexts": [{"name": user, "context": {"cluster": "kuberl-control-plane", "user": user}}]}


class ControlPlane:
    """Starts the components in order in `work_dir` (certificates, data, logs, kubeconfigs) and
    stops, by PID and process group, exactly those it started."""

    def __init__(self, work_dir: Path, binaries_dir: Path | None = None):
        self.work_dir = Path(work_dir)
        self.binaries = find_binaries(binaries_dir)
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        self.apiserver_port = free_port(HOST)
        self.server = f"https://{HOST}:{self.apiserver_port}"
        self.audit_log = self.work_dir / "logs" / "audit.log"
        self.started: list[Started] = []
        self._processes: dict[str, Any] = {}
        self._args: dict[str, list[str]] = {}  # each component's flags, to start it again
        self.bring_up_seconds: float | None = None
        self._ca: CertificateAuthority | None = None
        self._opener: urllib.request.OpenerDirector | None = None

    # -- what tests use --

    @property
    def has_controllers(self) -> bool:
        return "kube-controller-manager" in self.binaries

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate for `user` in `groups` (e.g. a node:
        system:node:NAME in system:nodes)."""
        assert self._ca is not None, "start() first"
        stem = user.replace(":", "-")
        path = self.work_dir / f"{stem}.kubeconfig"
        client = self._ca.client(stem, user, groups)
        path.write_text(yaml.safe_dump(_kubeconfig(self.server, self._ca.pair.cert, user, client)))
        return path

    def get(self, path: str) -> tuple[int, bytes]:
        """GET `path` from the apiserver as the admin: (status, body); status 0 when unreachable."""
        assert self._opener is not None, "start() first"
        try:
            with self._opener.open(self.server + path, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError:
            return 0, b""

    def rss_bytes(self) -> dict[str, int | None]:
        return {started.name: processes.rss_bytes(started) for started in self.started}

    # -- lifecycle --

    def start(self) -> ControlPlane:
        began = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.bring_up_seconds = time.monotonic() - began
        self._write_state()
        return self

    def stop(self) -> None:
        for started in reversed(self.started):
            processes.stop(started, self._processes.get(started.name))
        self._processes.clear()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        for sub in ("pki", "logs", "etcd", "run"):
            (self.work_dir / sub).mkdir(parents=True, exist_ok=True)
        pki = self.work_dir / "pki"
        self._ca = CertificateAuthority(pki)
        serving = self._ca.serving("apiserver", "kube-apiserver", [
            "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local"], [HOST, SERVICE_IP])
        sa = service_account_signing_key(pki)
        admin = self.kubeconfig_for("kubernetes-admin", ("system:masters",))
        os.replace(admin, self.kubeconfig)
        self._opener = self._https_opener(self._ca.pair, self._ca.client("probe", "kubernetes-admin", ("system:masters",)))

        etcd_url = self._start_etcd()
        self._start_apiserver(etcd_url, serving, sa)
        self._wait("kube-apiserver /readyz", lambda: self.get("/readyz")[0] == 200)
        if "kube-controller-manager" in self.binaries:
            self._start_controller_manager(sa)
        if "kube-scheduler" in self.binaries:
            self._start_scheduler()
        if self.has_controllers:
            self._wait("the default ServiceAccount",
                       lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200)

    @staticmethod
    def _https_opener(ca: KeyPair, client: KeyPair) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=str(ca.cert))
        context.load_cert_chain(str(client.cert), str(client.key))
        return urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                           urllib.request.HTTPSHandler(context=context))

    def restart(self, name: str) -> None:
        """Stop one component (SIGTERM, then SIGKILL after its grace) and start it again with the same flags,
        certificates, port and data, as a control-plane node's restart would; the apiserver is waited for until
        /readyz answers again."""
        index = next(i for i, started in enumerate(self.started) if started.name == name)
        processes.stop(self.started[index], self._processes.pop(name, None))
        self._launch(name, self._args[name])
        self.started[index] = self.started.pop()  # in its place: stop() stops in reverse start order
        self._write_state()
        if name == "kube-apiserver":
            self._wait("kube-apiserver /readyz", lambda: self.get("/readyz")[0] == 200)

    def _launch(self, name: str, args: list[str]) -> None:
        self._args[name] = args
        started, process = processes.launch(name, [str(self.binaries[name]), *args], os.environ,
                                            self.work_dir / "run", self.work_dir / "logs" / f"{name}.log")
        self.started.append(started)
        self._processes[name] = process

    def _without_insecure_port(self, name: str, flag: str) -> list[str]:
        # 1.20's controller-manager and scheduler still open an unauthenticated HTTP port by default
        # (10252, 10251; the apiserver's is gone): close it where the release still has the flag.
        return [f"{flag}=0"] if supports_flag(self.binaries[name], flag) else []

    def _start_etcd(self) -> str:
        client_url = f"http://{HOST}:{free_port(HOST)}"
        peer_url = f"http://{HOST}:{free_port(HOST)}"
        self._launch("etcd", [
            "--name=kuberl", f"--data-dir={self.work_dir / 'etcd'}",
            f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=kuberl={peer_url}", "--log-level=warn"])
        probe = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def healthy() -> bool:
            try:
                with probe.open(f"{client_url}/health", timeout=5) as response:
                    return json.loads(response.read()).get("health") == "true"
            except (OSError, ValueError):
                return False

        self._wait("etcd /health", healthy)
        return client_url

    def _start_apiserver(self, etcd_url: str, serving: KeyPair, sa: KeyPair) -> None:
        assert self._ca is not None
        policy = self.work_dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self._launch("kube-apiserver", [
            f"--etcd-servers={etcd_url}", f"--bind-address={HOST}", f"--advertise-address={HOST}",
            f"--secure-port={self.apiserver_port}", f"--cert-dir={self.work_dir / 'run'}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self._ca.pair.cert}",
            "--authorization-mode=Node,RBAC", f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            f"--service-account-issuer={ISSUER}", f"--api-audiences={ISSUER}",
            f"--service-account-key-file={sa.cert}", f"--service-account-signing-key-file={sa.key}",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=200"])

    def _component_kubeconfig(self, user: str) -> list[str]:
        path = self.kubeconfig_for(user)
        return [f"--kubeconfig={path}", f"--authentication-kubeconfig={path}", f"--authorization-kubeconfig={path}"]

    def _start_controller_manager(self, sa: KeyPair) -> None:
        assert self._ca is not None
        port = free_port(HOST)
        self._launch("kube-controller-manager", [
            *self._component_kubeconfig("system:kube-controller-manager"),
            f"--bind-address={HOST}", f"--secure-port={port}", f"--cert-dir={self.work_dir / 'run' / 'cm'}",
            "--controllers=*", "--use-service-account-credentials=true", "--leader-elect=false",
            f"--root-ca-file={self._ca.pair.cert}", f"--service-account-private-key-file={sa.key}",
            f"--cluster-signing-cert-file={self._ca.pair.cert}", f"--cluster-signing-key-file={self._ca.pair.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *self._without_insecure_port("kube-controller-manager", "--port")])
        self._wait("kube-controller-manager /healthz", lambda: _healthz(port))

    def _start_scheduler(self) -> None:
        port = free_port(HOST)
        self._launch("kube-scheduler", [
            *self._component_kubeconfig("system:kube-scheduler"),
            f"--bind-address={HOST}", f"--secure-port={port}", f"--cert-dir={self.work_dir / 'run' / 'scheduler'}",
            "--leader-elect=false", *self._without_insecure_port("kube-scheduler", "--port")])
        self._wait("kube-scheduler /healthz", lambda: _healthz(port))

    def _wait(self, what: str, ready: Any) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready():
            for started in self.started:
                if not started.alive():
                    raise ControlPlaneError(f"{started.name} exited while waiting for {what}; its log "
                                            f"({started.log}) ends:\n{processes.log_tail(started)}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{what} not ready in {READY_TIMEOUT:.0f} s; logs in {self.work_dir / 'logs'}")
            time.sleep(0.2)

    def _write_state(self) -> None:
        state = {"server": self.server, "kubeconfig": str(self.kubeconfig), "auditLog": str(self.audit_log),
                 "processes": [started.to_json() for started in self.started]}
        (self.work_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def _healthz(port: int) -> bool:
    # the component's serving certificate is self-signed, and /healthz needs no credentials
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(f"https://{HOST}:{port}/healthz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def stop_recorded(work_dir: Path) -> list[str]:
    """Stop the processes a (perhaps other) process's ControlPlane.start() recorded in `work_dir`;
    the names of those that were still running."""
    state = json.loads((Path(work_dir) / STATE_FILE).read_text())
    stopped = []
    for record in reversed(state["processes"]):
        started = Started(**record)
        if started.alive():
            processes.stop(started)
            stopped.append(started.name)
    return stopped
