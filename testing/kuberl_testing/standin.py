"""The local stand-in cluster: the API emulator, moto's S3, the real operator and the pod runner.

Everything listens on loopback. The emulator and the operator are subprocesses (as they would be
separate programs in a cluster); moto and the pod runner are threads of the test process, so a
scenario can kill a pod's process the way a crash would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from kuberl_testing import kueue
from kuberl_testing.podrunner import (
    PodRunner,
    RunnerOptions,
    api_client_from_kubeconfig,
)
from kuberl_testing.ports import free_port
from kuberl_testing.s3server import DEFAULT_CREDENTIALS, S3Server

NAMESPACE = "kuberl-e2e"
BUCKET = "kuberl-e2e"
S3_SECRET = "s3-credentials"
TRAINER_IMAGE = "kuberl.local/kuberl-trainer:e2e"
UNPULLABLE_IMAGE = "kuberl.local/does-not-exist:e2e"  # the pod runner fails it as ErrImagePull
PEERING_NAME = "kuberl"
BIN = Path(sys.executable).parent

# What every pod of the stand-in gets on top of the operator's env: one torch thread per process
# (two cores for everyone), and a Ray node that waits long enough on a loaded machine.
POD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KUBERL_NODE_WAIT_SECONDS": "180",
           # The stand-in's "image" is this environment: pods import the code under test, as the operator does.
           **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {})}


class StandInCluster:
    """Starts the parts in order, and stops what it started, by PID, in reverse."""

    kind = "standin"
    namespace = NAMESPACE
    trainer_image = TRAINER_IMAGE
    unpullable_image = UNPULLABLE_IMAGE
    s3_secret = S3_SECRET
    kueue_queue = "research"

    def __init__(self, work_dir: Path, status_port: int | None = None):
        self.work_dir = work_dir
        self.kubeconfig = work_dir / "kubeconfig.yaml"
        self.operator_kubeconfig = self.kubeconfig  # the credentials the operator runs with
        self._emulator: subprocess.Popen | None = None
        self._operator: subprocess.Popen | None = None
        self.runner: PodRunner | None = None
        self.s3: S3Server | None = None
        self.operator_log = work_dir / "operator.log"
        self.status_port = status_port or free_port("")  # the operator's KUBERL_STATUS_PORT
        self.health_port = free_port("127.0.0.1")
        self.metrics_port = free_port("127.0.0.1")

    # -- what scenarios use --

    @property
    def storage_uri(self) -> str:
        return f"s3://{BUCKET}/runs"

    @property
    def s3_endpoint(self) -> str:
        """The endpoint pods use (spec.storage.endpoint)."""
        assert self.s3 is not None
        return self.s3.endpoint

    @property
    def local_s3_endpoint(self) -> str:
        """The endpoint the test process uses to check what the run wrote."""
        return self.s3_endpoint

    def kill_pod_process(self, namespace: str, name: str) -> None:
        """SIGKILL the pod's main process, as a crash or an OOM kill would."""
        assert self.runner is not None
        if not self.runner.kill(namespace, name, signal.SIGKILL):
            raise AssertionError(f"pod {namespace}/{name} has no running process to kill")

    def pod_has_process(self, namespace: str, name: str) -> bool:
        assert self.runner is not None
        return self.runner.has_processes(namespace, name)

    def admit_queued(self, namespace: str, group: str) -> None:
        """What Kueue does on admission: remove its scheduling gate from every pod of the group."""
        admitted = kueue.admit(k8s.CoreV1Api(api_client_from_kubeconfig(str(self.kubeconfig))), namespace, group)
        assert admitted, f"no pods in Kueue pod group {group}"

    def restart_operator(self) -> None:
        """Stop the operator (SIGTERM, as a rollout would) and start a new one."""
        assert self._operator is not None
        self._operator.send_signal(signal.SIGTERM)
        try:
            self._operator.wait(30)
        except subprocess.TimeoutExpired:
            self._operator.kill()
            self._operator.wait(5)
        self._start_operator()

    def diagnostics(self, namespace: str, lines: int = 40) -> str:
        """The operator's log and every pod's log, tails only, for a failed scenario's report."""
        parts = [_tail("operator", self.operator_log, lines * 2)]
        if self.runner is not None:
            parts += [_tail(f"pod {key}", path, lines) for key, path in self.runner.log_paths(namespace).items()]
            if self.runner.errors:
                parts.append("pod runner errors:\n" + "\n".join(self.runner.errors[-10:]))
        return "\n".join(parts)

    # -- lifecycle --

    def start(self) -> StandInCluster:
        try:
            return self._start()
        except BaseException:
            self.stop()  # whatever did start
            raise

    def _start(self) -> StandInCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.s3 = S3Server().start()
        self.s3.create_bucket(BUCKET)
        self._start_emulator()
        api = api_client_from_kubeconfig(str(self.kubeconfig))
        self.runner = PodRunner(api, RunnerOptions(work_dir=self.work_dir / "pods", fixed_ports={
            self.status_port: self.status_port}, extra_env=POD_ENV, unpullable_images=re.escape(UNPULLABLE_IMAGE))).start()
        self._create_peering(k8s.CustomObjectsApi(api))
        self._start_operator()
        self._prepare_namespace(k8s.CoreV1Api(api))
        return self

    def stop(self) -> None:
        for process in (self._operator, self._emulator):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        if self.runner is not None:
            self.runner.stop()
        if self.s3 is not None:
            self.s3.stop()

    def _start_emulator(self) -> None:
        log = open(self.work_dir / "emulator.log", "wb")  # noqa: SIM115 (the child owns it)
        self._emulator = subprocess.Popen(
            [sys.executable, "-m", "kuberl_testing.apiserver", "--port", "0", "--kubeconfig", str(self.kubeconfig),
             "--kueue"],  # queued pods are gated as Kueue's webhook gates them
            stdout=subprocess.PIPE, stderr=log)
        assert self._emulator.stdout is not None
        url = self._emulator.stdout.readline().decode().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the API emulator did not start: {url!r}; see {self.work_dir / 'emulator.log'}")

    def _operator_command(self) -> tuple[list[str], dict[str, str]]:
        """The operator's argv and environment (its health port must be self.health_port)."""
        env = {**os.environ, "KUBECONFIG": str(self.operator_kubeconfig), "KUBERL_TRAINER_IMAGE": TRAINER_IMAGE,
               "KUBERL_STATUS_PORT": str(self.status_port), "KUBERL_STATUS_POLL_SECONDS": "1",
               "KUBERL_DEFAULT_HEAD_CPU": "1", "KUBERL_DEFAULT_HEAD_MEMORY": "2Gi",
               "KUBERL_DEFAULT_WORKER_CPU": "1", "KUBERL_DEFAULT_WORKER_MEMORY": "1Gi"}
        return [str(BIN / "kuberl"), "operator", "--all-namespaces", "--metrics-port", str(self.metrics_port),
                "--health-port", str(self.health_port)], env

    def _start_operator(self) -> None:
        argv, env = self._operator_command()
        log = open(self.operator_log, "ab")  # noqa: SIM115 (the child owns it)
        self._operator = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._operator.poll() is not None:
                raise RuntimeError(f"the operator exited with {self._operator.returncode}:\n"
                                   + _tail("operator", self.operator_log, 40))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("the operator's /healthz did not answer in 60 s:\n" + _tail("operator", self.operator_log, 40))

    def _create_peering(self, custom: k8s.CustomObjectsApi) -> None:
        # What the chart installs: Kopf's peering object, without which an operator with peering on waits.
        custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", {
            "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING_NAME}})

    def _prepare_namespace(self, core: k8s.CoreV1Api) -> None:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")
        core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": S3_SECRET},
                                                  "stringData": {k: DEFAULT_CREDENTIALS[k] for k in keys}})

    def s3_credentials(self) -> dict[str, Any]:
        return {"aws_access_key_id": DEFAULT_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "aws_secret_access_key": DEFAULT_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                "region_name": DEFAULT_CREDENTIALS["AWS_REGION"]}

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return response.read().decode()


def _tail(title: str, path: Path | None, lines: int) -> str:
    if path is None or not Path(path).exists():
        return f"--- {title}: no log"
    text = Path(path).read_text(errors="replace").splitlines()[-lines:]
    return f"--- {title} ({path}):\n" + "\n".join(text)


def describe(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)[:4000]
