"""A bare real control plane for the README's cluster quick start: etcd, kube-apiserver 1.20,
kube-controller-manager and kube-scheduler (`make control-plane`), and nothing installed. The quick
start's own `helm install` installs the chart; then the pod runner joins as the node and the operator
starts from what the chart installed.

The chart's operator Deployment is installed as written, but its pod is not run: the pod runner runs
pods as local processes and cannot give one in-cluster credentials, so the node answers ErrImagePull
for the operator's image. Instead `kuberl operator` runs here with that Deployment's own command,
arguments and environment (so `--set trainer.image...` reaches the trainer pods as it would in a
cluster), on a TokenRequest token for the chart's ServiceAccount; only its metrics and health ports
are free ports of this machine, which other processes share.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from controlplanecluster import ControlPlaneCluster
from kubernetes import client as k8s

from kuberl_testing.controlplane import ControlPlane
from kuberl_testing.standin import BIN

STATUS_PORT_ENV = "KUBERL_STATUS_PORT"


class QuickstartCluster(ControlPlaneCluster):
    kind = "control-plane (bare, for the quick start)"

    def __init__(self, work_dir: Path, namespace: str, fixed_ports: tuple[int, ...] = ()):
        super().__init__(work_dir)
        self.namespace = namespace          # the experiments' namespace, for diagnostics()
        self.fixed_ports = fixed_ports      # ports the test reaches pods on (as a port-forward would)
        self.operator_container: dict[str, Any] = {}

    def _start(self) -> QuickstartCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.plane = ControlPlane(self.work_dir / "control-plane").start()
        self.kubeconfig = self.plane.kubeconfig
        return self

    def chart_installed(self, release_namespace: str) -> None:
        """What follows `helm install`: the node joins, and the operator starts as the chart's Deployment says."""
        (deployment,) = k8s.AppsV1Api(self.api_client).list_namespaced_deployment(release_namespace).items
        pod = self.api_client.sanitize_for_serialization(deployment.spec.template)["spec"]
        (self.operator_container,) = pod["containers"]
        self.operator_account = (release_namespace, pod["serviceAccountName"])
        self.unpullable_image = self.operator_container["image"]
        env = self._deployment_env(release_namespace)
        # The head's /status port as the chart sets it: every pod gets it at its own address (fixed), as in a cluster.
        self.status_port = int(env[STATUS_PORT_ENV])
        self._start_node()
        assert self.runner is not None
        self.runner.options.fixed_ports.update({port: port for port in self.fixed_ports})
        self.operator_kubeconfig = self._token_kubeconfig(*self.operator_account)
        self._start_operator()

    def _deployment_env(self, namespace: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for var in self.operator_container.get("env") or []:
            if "valueFrom" not in var:  # the API server leaves out an empty value
                env[var["name"]] = var.get("value", "")
            elif ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == "metadata.namespace":
                env[var["name"]] = namespace
            else:
                raise AssertionError(f"the operator's env {var['name']} has a source this harness does not resolve")
        return env

    def _operator_command(self) -> tuple[list[str], dict[str, str]]:
        container = self.operator_container
        command = [*container["command"], *container.get("args", [])]
        assert command[0] == "kuberl", command
        ports = {"--metrics-port": self.metrics_port, "--health-port": self.health_port}
        argv = [str(BIN / "kuberl")]
        for word in command[1:]:
            flag = word.split("=", 1)[0]
            argv.append(f"{flag}={ports[flag]}" if flag in ports else word)
        namespace = self.operator_account[0]
        env = {**os.environ, **self._deployment_env(namespace), "KUBECONFIG": str(self.operator_kubeconfig)}
        return argv, env


def image_stand_ins(document: dict[str, Any]) -> dict[str, Any]:
    """The document with each container the pod runner cannot run (it has no images) given a local command that
    does the same job: MinIO's server becomes moto's S3 server on the same port, and MinIO's client making a
    bucket becomes boto3 making that bucket. A container with any other image fails the test: the page must
    not grow a step this harness silently cannot run."""
    spec = (document.get("spec") or {}).get("template", {}).get("spec")
    if spec is None:
        return document
    for container in spec["containers"]:
        image = container["image"]
        if image.startswith("quay.io/minio/minio:"):
            port = str(next(p["containerPort"] for p in container["ports"]))
            container["command"] = ["python", "-m", "moto.server", "--host", "$(POD_IP)", "--port", port]
            container.pop("args", None)
            container["env"] = [*container.get("env", []),
                                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        elif image.startswith("quay.io/minio/mc:"):
            script = " ".join(container.get("args", []))
            alias = re.search(r"alias set (\S+) (\S+)", script)
            assert alias, f"no `mc alias set` in {script!r}"
            bucket = re.search(rf"\bmb (?:--\S+ )*{re.escape(alias.group(1))}/(\S+)", script)
            assert bucket, f"no `mc mb` of a bucket in {script!r}"
            container["command"] = ["python", "-c", MAKE_BUCKET, alias.group(2), bucket.group(1)]
            container.pop("args", None)
        else:
            raise AssertionError(f"no stand-in for the image {image}: the pod runner runs local commands only")
    return document


MAKE_BUCKET = """
import sys, time
import boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
for attempt in range(240):
    try:
        s3.create_bucket(Bucket=sys.argv[2])
        break
    except Exception as error:  # the server is not up yet: mc's Job retries the same way
        last = error
        time.sleep(0.5)
else:
    sys.exit(f"no bucket {sys.argv[2]}: {last}")
print(f"Bucket created successfully `{sys.argv[2]}`.")
"""
