"""A real cluster (kind, set up by e2e/kind/run.sh): the operator from the chart, MinIO for S3.

Settings come from the environment that e2e/kind/env.sh exports (E2E_NAMESPACE, E2E_STORAGE_URI,
E2E_S3_ENDPOINT, E2E_S3_SECRET, E2E_TRAINER_IMAGE, E2E_KUEUE_QUEUE, E2E_KUEUE_CLUSTER_QUEUE) and the kubeconfig from $KUBECONFIG. The test
process reaches MinIO through `kubectl port-forward`.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
from typing import Any

from kubernetes import client as k8s
from kubernetes import config

OPERATOR_SELECTOR = "app.kubernetes.io/name=kuberl,app.kubernetes.io/component=operator"
# Kills every process of the container but its first: PID 1 ignores signals sent from inside its
# own PID namespace, and without its Ray daemons (head) or raylet (worker) it exits with an error.
KILL_ALL_BUT_PID_1 = ("import os, signal\n"
                      "for p in os.listdir('/proc'):\n"
                      "    if p.isdigit() and int(p) not in (1, os.getpid()):\n"
                      "        try: os.kill(int(p), signal.SIGKILL)\n"
                      "        except OSError: pass\n")


class KindCluster:
    kind = "kind"

    def __init__(self) -> None:
        self.namespace = os.environ.get("E2E_NAMESPACE", "kuberl-e2e")
        self.storage_uri = os.environ.get("E2E_STORAGE_URI", "s3://kuberl-e2e/runs")
        self.s3_endpoint = os.environ.get("E2E_S3_ENDPOINT", f"http://minio.{self.namespace}.svc.cluster.local:9000")
        self.s3_secret = os.environ.get("E2E_S3_SECRET", "s3-credentials")
        self.trainer_image = os.environ.get("E2E_TRAINER_IMAGE", "kuberl.local/kuberl-trainer:e2e")
        self.unpullable_image = "kuberl.local/does-not-exist:e2e"  # in no registry the nodes can reach
        self.kueue_queue = os.environ.get("E2E_KUEUE_QUEUE", "research")
        self.kueue_cluster_queue = os.environ.get("E2E_KUEUE_CLUSTER_QUEUE", "kuberl-e2e")
        self.local_s3_endpoint = ""
        self._port_forward: subprocess.Popen | None = None
        self._core: k8s.CoreV1Api | None = None

    def start(self) -> KindCluster:
        config.load_kube_config()
        self._core = k8s.CoreV1Api()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self._port_forward = subprocess.Popen(
            ["kubectl", "-n", self.namespace, "port-forward", "svc/minio", f"{port}:9000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.local_s3_endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("kubectl port-forward to MinIO did not come up")

    def stop(self) -> None:
        if self._port_forward is not None:
            self._port_forward.terminate()
            self._port_forward.wait(10)

    def s3_credentials(self) -> dict[str, Any]:
        assert self._core is not None
        secret = self._core.read_namespaced_secret(self.s3_secret, self.namespace)
        data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        return {"aws_access_key_id": data["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": data["AWS_SECRET_ACCESS_KEY"],
                "region_name": data.get("AWS_REGION", "us-east-1")}

    def kill_pod_process(self, namespace: str, name: str) -> None:
        subprocess.run(["kubectl", "-n", namespace, "exec", name, "--", "python", "-c", KILL_ALL_BUT_PID_1],
                       check=False, timeout=60)

    def restart_operator(self) -> None:
        """Delete the operator's pod; its Deployment (Recreate) starts a new one."""
        namespace = os.environ.get("OPERATOR_NAMESPACE", "kuberl-system")
        subprocess.run(["kubectl", "-n", namespace, "delete", "pod", "-l", OPERATOR_SELECTOR, "--wait=true"],
                       check=True, timeout=120)
        subprocess.run(["kubectl", "-n", namespace, "rollout", "status", "deployment/kuberl", "--timeout=180s"],
                       check=True, timeout=200)

    def pod_has_process(self, namespace: str, name: str) -> bool:
        assert self._core is not None
        try:
            pod = self._core.read_namespaced_pod(name, namespace)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return pod.status.phase == "Running"

    def admit_queued(self, namespace: str, group: str) -> None:
        """Let Kueue admit: the ClusterQueue (e2e/kind/kueue.sh) holds every workload until released here;
        once the group's pods are ungated it holds again (Hold keeps what is already admitted)."""
        custom = k8s.CustomObjectsApi()

        def stop_policy(policy: str) -> None:
            custom.patch_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues",
                                               self.kueue_cluster_queue, {"spec": {"stopPolicy": policy}})

        assert self._core is not None
        stop_policy("None")
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                pods = self._core.list_namespaced_pod(namespace,
                                                      label_selector=f"kueue.x-k8s.io/pod-group-name={group}").items
                if pods and not any(p.spec.scheduling_gates for p in pods):
                    return
                time.sleep(1)
            raise AssertionError(f"Kueue did not admit pod group {group} within 120 s")
        finally:
            stop_policy("Hold")

    def diagnostics(self, namespace: str, lines: int = 40) -> str:
        assert self._core is not None
        parts = []
        for pod in self._core.list_namespaced_pod(namespace).items:
            try:
                log = self._core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=lines)
            except k8s.ApiException as exc:
                log = f"(no log: {exc.reason})"
            parts.append(f"--- pod {namespace}/{pod.metadata.name} ({pod.status.phase}):\n{log}")
        return "\n".join(parts) + "\n(see e2e/kind/dump-logs.sh for the operator's log)"
