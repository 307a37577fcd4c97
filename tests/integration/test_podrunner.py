"""The stand-in pod runner against the Kubernetes API emulator over HTTP, with real local processes."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from kuberl_testing.apiserver import EmulatorThread
from kuberl_testing.podrunner import PodRunner, RunnerOptions
from kuberl_testing.ports import free_port
from kuberl_testing.process_tree import still_running

NS = "default"
PY = sys.executable


@pytest.fixture()
def cluster(tmp_path) -> Iterator[tuple[k8s.CoreV1Api, PodRunner]]:
    with EmulatorThread(with_kuberl_crd=False) as emulator:
        configuration = k8s.Configuration()
        configuration.host = emulator.url
        api = k8s.CoreV1Api(k8s.ApiClient(configuration))
        runner = PodRunner(k8s.ApiClient(configuration), RunnerOptions(work_dir=tmp_path / "pods", poll_seconds=0.1))
        with runner:
            yield api, runner
        assert not runner.errors, runner.errors


def _pod(name: str, code: str, *, args: list[str] | None = None, labels: dict[str, str] | None = None,
         **container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "kuberl:test", "command": [PY, "-c", code],
                                     "args": args or [], **container}]}}


def _read(api: k8s.CoreV1Api, name: str) -> dict[str, Any]:
    return json.loads(api.read_namespaced_pod(name, NS, _preload_content=False).data)


def _wait(fn: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _terminal(api: k8s.CoreV1Api, name: str) -> dict[str, Any]:
    return _wait(lambda: (p := _read(api, name))["status"].get("phase") in ("Succeeded", "Failed") and p,
                 what=f"pod {name} to finish")


WRITE_REPORT = """
import json, os, pathlib, sys
report = {k: os.environ.get(k) for k in ("POD_IP", "RAY_ADDRESS", "TOKEN", "HOME")}
report["spec"] = pathlib.Path(sys.argv[1]).read_text()
report["argv"] = sys.argv[1:]
pathlib.Path("/dev/termination-log").write_text(json.dumps(report))
"""


def test_a_pod_runs_with_its_env_and_files_on_its_own_loopback_address(cluster):
    api, runner = cluster
    api.create_namespaced_config_map(NS, {"metadata": {"name": "cfg"}, "data": {"experiment.yaml": "spec: 1\n"}})
    api.create_namespaced_secret(NS, {"metadata": {"name": "tok"}, "stringData": {"token": "s3cr3t"}})
    pod = _pod("reporter", WRITE_REPORT.replace("/dev/termination-log", "/dev/termination-log"),
               args=["/etc/kuberl/experiment.yaml", "$(POD_IP)"],
               env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "RAY_ADDRESS", "value": "$(POD_IP):6379"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "token"}}}],
               volumeMounts=[{"name": "config", "mountPath": "/etc/kuberl"}])
    pod["spec"]["volumes"] = [{"name": "config", "configMap": {"name": "cfg"}}]
    api.create_namespaced_pod(NS, pod)
    status = _terminal(api, "reporter")["status"]
    assert status["phase"] == "Succeeded"
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    report = json.loads(terminated["message"])
    ip = status["podIP"]
    assert ip.startswith("127.0.") and not ip.startswith("127.0.0.")
    assert report["POD_IP"] == ip and report["RAY_ADDRESS"] == f"{ip}:6379" and report["argv"][1] == ip
    assert report["TOKEN"] == "s3cr3t"
    assert report["spec"] == "spec: 1\n"
    assert report["HOME"].startswith(str(runner.work_dir))


def test_a_failing_pod_reports_its_exit_code_and_log_tail(cluster):
    api, _ = cluster
    api.create_namespaced_pod(NS, _pod("crasher", "import sys; print('boom: bad thing'); sys.exit(3)",
                                       terminationMessagePolicy="FallbackToLogsOnError"))
    status = _terminal(api, "crasher")["status"]
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert status["phase"] == "Failed"
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert "boom: bad thing" in terminated["message"]


SERVE = """
import http.server, sys
port = int(sys.argv[1].split("=")[1])
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"hello from " + sys.argv[2].encode())
http.server.HTTPServer((sys.argv[2], port), Hello).serve_forever()
"""
FETCH = """
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode(), file=open("/dev/termination-log", "w"))
"""


def test_service_names_reach_the_selected_pod_through_its_local_port(cluster):
    api, runner = cluster
    server = _pod("server", SERVE, args=["--port=7000", "$(POD_IP)"], labels={"app": "hello"},
                  ports=[{"name": "http", "containerPort": 7000}],
                  env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}])
    api.create_namespaced_service(NS, {"metadata": {"name": "hello"},
                                       "spec": {"selector": {"app": "hello"},
                                                "ports": [{"port": 80, "targetPort": "http"}]}})
    api.create_namespaced_pod(NS, _pod("client", FETCH, args=["http://hello.default.svc:80/"]))
    waiting = _wait(lambda: (status := _read(api, "client")["status"]).get("containerStatuses") and status,
                    what="the runner to report the client pod")
    assert waiting["phase"] == "Pending"
    assert waiting["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    api.create_namespaced_pod(NS, server)
    status = _terminal(api, "client")["status"]
    server_ip = _read(api, "server")["status"]["podIP"]
    assert status["phase"] == "Succeeded", status
    assert status["containerStatuses"][0]["state"]["terminated"]["message"].strip() == f"hello from {server_ip}"
    assert runner.process_of(NS, "server") is not None


FETCH_FROM_FILE = """
import json, sys, urllib.request
url = json.load(open(sys.argv[1]))["storage"]["endpoint"]
print(url, urllib.request.urlopen(url, timeout=10).read().decode(), file=open("/dev/termination-log", "w"))
"""


def test_service_names_in_mounted_files_reach_the_selected_pod(cluster):
    """As DNS would in a cluster: a Service named in a mounted ConfigMap (an experiment's storage endpoint) is
    the selected pod's address, and the pod waits for that pod as it does for a name in its command."""
    api, _ = cluster
    api.create_namespaced_config_map(NS, {"metadata": {"name": "store"}, "data": {
        "experiment.json": json.dumps({"storage": {"endpoint": "http://minio:9000"}})}})
    api.create_namespaced_service(NS, {"metadata": {"name": "minio"},
                                       "spec": {"selector": {"app": "minio"}, "ports": [{"port": 9000}]}})
    client = _pod("reader", FETCH_FROM_FILE, args=["/etc/kuberl/experiment.json"],
                  volumeMounts=[{"name": "config", "mountPath": "/etc/kuberl"}])
    client["spec"]["volumes"] = [{"name": "config", "configMap": {"name": "store"}}]
    api.create_namespaced_pod(NS, client)
    reported = _wait(lambda: _read(api, "reader")["status"].get("containerStatuses"), what="the runner to report the reader")
    assert reported[0]["state"]["waiting"]["reason"] == "ContainerCreating"
    api.create_namespaced_pod(NS, _pod("minio", SERVE, args=["--port=9000", "$(POD_IP)"], labels={"app": "minio"},
                                       ports=[{"containerPort": 9000}],
                                       env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]))
    status = _terminal(api, "reader")["status"]
    assert status["phase"] == "Succeeded", status
    server = _read(api, "minio")["status"]["podIP"]
    url, answer = status["containerStatuses"][0]["state"]["terminated"]["message"].split(" ", 1)
    assert url.startswith(f"http://{server}:") and answer.strip() == f"hello from {server}"


LINGER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
open(os.environ["HOME"] + "/pids", "w").write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


def _pids(runner: PodRunner, name: str) -> list[int]:
    for key, log in runner.log_paths(NS).items():
        pids = log.parent / "home" / "pids"
        if key.startswith(f"{NS}/{name}#") and pids.exists() and pids.read_text():
            return [int(p) for p in pids.read_text().split()]
    return []


def test_deleting_a_pod_stops_its_processes_even_those_that_left_its_session(cluster):
    api, runner = cluster
    api.create_namespaced_pod(NS, _pod("lingerer", LINGER, terminationGracePeriodSeconds=1))
    pids = _wait(lambda: _pids(runner, "lingerer"), what="the pod's pids")
    assert all(still_running(pid) for pid in pids)
    assert runner.has_processes(NS, "lingerer")
    api.delete_namespaced_pod("lingerer", NS)
    _wait(lambda: not any(still_running(pid) for pid in pids), timeout=20, what="the pod's processes to end")
    _wait(lambda: not runner.has_processes(NS, "lingerer"), what="the runner to see them gone")


def test_a_killed_process_fails_the_pod_and_a_missing_secret_keeps_it_pending(cluster):
    api, runner = cluster
    api.create_namespaced_pod(NS, _pod("victim", LINGER))
    _wait(lambda: _pids(runner, "victim"), what="the victim to start")
    assert runner.kill(NS, "victim")
    status = _terminal(api, "victim")["status"]
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137

    api.create_namespaced_pod(NS, _pod("needs-secret", "pass", env=[
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]))
    waiting = _wait(lambda: _read(api, "needs-secret")["status"].get("containerStatuses"), what="a waiting status")
    assert waiting[0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    assert 'secret "later" not found' in waiting[0]["state"]["waiting"]["message"]
    api.create_namespaced_secret(NS, {"metadata": {"name": "later"}, "stringData": {"token": "x"}})
    assert _terminal(api, "needs-secret")["status"]["phase"] == "Succeeded"


def test_stopping_the_runner_stops_every_pod(tmp_path):
    with EmulatorThread(with_kuberl_crd=False) as emulator:
        configuration = k8s.Configuration()
        configuration.host = emulator.url
        api = k8s.CoreV1Api(k8s.ApiClient(configuration))
        runner = PodRunner(k8s.ApiClient(configuration), RunnerOptions(work_dir=tmp_path, poll_seconds=0.1)).start()
        try:
            api.create_namespaced_pod(NS, _pod("a", LINGER))
            pids = _wait(lambda: _pids(runner, "a"), what="the pod to start")
        finally:
            runner.stop()
        assert not any(still_running(pid) for pid in pids)
        assert os.path.isdir(tmp_path)
        assert free_port() > 0


RAY_DRIVER = """
import json, os, time
import ray
from kuberl.trainer.distributed.ray_runtime import init_ray
init_ray(os.environ["RAY_ADDRESS"])
deadline = time.time() + 60
while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
    time.sleep(0.5)
ips = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
open("/dev/termination-log", "w").write(json.dumps(ips))
"""


def _ray_pod(name: str, script: str, labels: dict[str, str], ports: list[int]) -> dict[str, Any]:
    pod = _pod(name, "", labels=labels, ports=[{"containerPort": p} for p in ports], env=[
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "RAY_ADDRESS", "value": "$(POD_IP):6379"},
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ray-token", "key": "token"}}},
        {"name": "HOME", "value": "/tmp"}],
        volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}], terminationMessagePolicy="FallbackToLogsOnError")
    pod["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", script]
    pod["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    return pod


@pytest.mark.slow
def test_ray_head_and_worker_pods_form_one_cluster_with_token_auth(cluster):
    api, runner = cluster
    api.create_namespaced_secret(NS, {"metadata": {"name": "ray-token"}, "stringData": {"token": "a" * 32}})
    api.create_namespaced_service(NS, {"metadata": {"name": "exp-head"}, "spec": {
        "selector": {"role": "head"}, "ports": [{"name": "gcs", "port": 6379, "targetPort": 6379}]}})
    probe = "python -c 'import socket; socket.create_connection((\"exp-head\", 6379), 2)'"
    worker = (f"until {probe} 2>/dev/null; do sleep 1; done; exec ray start --address=exp-head:6379 "
              "--node-ip-address=${POD_IP} --num-cpus=1 --block --disable-usage-stats")
    head = ("ray start --head --node-ip-address=${POD_IP} --port=6379 --num-cpus=1 --disable-usage-stats "
            f"&& exec python -c '{RAY_DRIVER}'")
    api.create_namespaced_pod(NS, _ray_pod("exp-worker-0", worker, {"role": "worker"}, []))
    api.create_namespaced_pod(NS, _ray_pod("exp-head", head, {"role": "head"}, [6379]))
    status = _wait(lambda: (p := _read(api, "exp-head"))["status"].get("phase") in ("Succeeded", "Failed") and p,
                   timeout=120, what="the Ray driver pod")["status"]
    assert status["phase"] == "Succeeded", status["containerStatuses"][0]["state"]
    worker_ip = _read(api, "exp-worker-0")["status"]["podIP"]
    assert json.loads(status["containerStatuses"][0]["state"]["terminated"]["message"]) == \
        sorted([status["podIP"], worker_ip])
    api.delete_namespaced_pod("exp-worker-0", NS)
    _wait(lambda: runner.process_of(NS, "exp-worker-0") is None, what="the worker to stop")


def test_the_runner_runs_as_a_command_until_sigterm(tmp_path):
    import signal
    import subprocess

    from kuberl_testing.apiserver import write_kubeconfig

    with EmulatorThread(with_kuberl_crd=False) as emulator:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emulator.url)
        runner = subprocess.Popen([PY, "-m", "kuberl_testing.podrunner", "--kubeconfig", str(kubeconfig),
                                   "--work-dir", str(tmp_path / "pods")], stdout=subprocess.PIPE)
        try:
            configuration = k8s.Configuration()
            configuration.host = emulator.url
            api = k8s.CoreV1Api(k8s.ApiClient(configuration))
            api.create_namespaced_pod(NS, _pod("hello", "print('hi', file=open('/dev/termination-log', 'w'))"))
            status = _wait(lambda: (p := _read(api, "hello"))["status"].get("phase") == "Succeeded" and p,
                           what="the pod to succeed")["status"]
            assert status["containerStatuses"][0]["state"]["terminated"]["message"].strip() == "hi"
        finally:
            runner.send_signal(signal.SIGTERM)
            assert runner.wait(30) == 0
        assert b"pods under" in runner.stdout.read()
