"""The real Kopf operator against the API emulator over HTTP, with kubelet-like pod status updates.

For integration tests and benchmarks: `OperatorHarness` starts an `EmulatorThread`, writes a
kubeconfig, runs the operator in-process with `kopf.testing.KopfRunner` (start/stop/restart), and
offers a kubernetes client plus the few helpers tests need (set a pod's phase and exit code as a
kubelet would, wait for a condition). No mocks: every call goes over HTTP to the emulator.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
from kubernetes.client import ApiException

from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl_testing.apiserver import EmulatorThread, write_kubeconfig

T = TypeVar("T")
_loopback = itertools.count(30)


class TrainerStatusServer:
    """A stand-in for the trainer's /status on its own loopback address (the head pod's IP) and `port`
    (the operator's KUBERL_STATUS_PORT)."""

    def __init__(self, body: dict[str, Any], port: int):
        self.body = body
        self.ip = f"127.0.0.{next(_loopback)}"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                data = json.dumps(outer.body).encode()
                self.send_response(200 if self.path == "/status" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((self.ip, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def experiment_body(name: str, **spec: Any) -> dict[str, Any]:
    """A small valid RLExperiment; keyword arguments replace top-level spec fields."""
    base: dict[str, Any] = {
        "algorithm": "ppo",
        "env": {"id": "CartPole-v1"},
        "stop": {"timesteps": 1000},
        "storage": {"uri": "s3://bucket/runs"},
        "workers": {"replicas": 1},
    }
    base.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLExperiment", "metadata": {"name": name}, "spec": base}


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Poll until `check()` is truthy; its value, or AssertionError naming what did not happen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(ApiException):
            last = check()
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: last value {last!r}")


class OperatorHarness:
    def __init__(self, namespaces: list[str], env: dict[str, str] | None = None):
        self.namespaces = namespaces
        self.env = {"KUBERL_STATUS_POLL_SECONDS": "0.5", **(env or {})}
        self.emulator_thread = EmulatorThread()
        self._dir = tempfile.TemporaryDirectory(prefix="kuberl-operator-")
        self.kubeconfig = Path(self._dir.name) / "kubeconfig"
        self.runner: Any = None
        self._saved_env: dict[str, str | None] = {}

    # -- lifecycle --

    def start(self) -> OperatorHarness:
        self.emulator_thread.start()
        write_kubeconfig(self.kubeconfig, self.emulator_thread.url)
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(str(self.kubeconfig), client_configuration=configuration)
        self.api = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        for key, value in {**self.env, "KUBECONFIG": str(self.kubeconfig)}.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value
        self.start_operator()
        return self

    def start_operator(self) -> None:
        from kopf.testing import KopfRunner

        args = ["run", "--standalone", "-m", "kuberl.operator.handlers"]
        for namespace in self.namespaces:
            args += ["-n", namespace]
        self.runner = KopfRunner(args, timeout=120, reraise=False)
        self.runner.__enter__()

    def stop_operator(self) -> None:
        if self.runner is not None:
            self.runner.__exit__(None, None, None)
            self.runner = None

    def restart_operator(self) -> None:
        self.stop_operator()
        self.start_operator()

    def stop(self) -> None:
        self.stop_operator()
        self.emulator_thread.stop()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._dir.cleanup()

    def __enter__(self) -> OperatorHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def emulator(self) -> Any:
        return self.emulator_thread.emulator

    @property
    def operator_output(self) -> str:
        return self.runner.output if self.runner is not None else ""

    # -- the API, as a user and as a kubelet --

    def apply(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get(namespace, name).get("status") or {}

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any]:
        return next((c for c in self.status(namespace, name).get("conditions", []) if c["type"] == type_), {})

    def patch_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec},
                                                          _content_type="application/merge-patch+json")

    def delete(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        items = json.loads(self.core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
        return {p["metadata"]["name"]: p for p in items}

    def objects(self, namespace: str, plural: str, group: str = "") -> list[dict[str, Any]]:
        return self.emulator_thread.call(self.emulator.list_objects, group, plural, namespace)

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return self.objects(namespace, "events")

    def set_pod_status(self, namespace: str, name: str, phase: str, *, ip: str | None = None,
                       exit_code: int | None = None, message: str | dict[str, Any] | None = None,
                       waiting: str | None = None, reason: str | None = None, image_id: str = "") -> None:
        """Write a pod's status as the kubelet would (phase, pod IP, container state); `reason`: the
        terminated container's (Completed or Error by default; OOMKilled for one killed at its limit);
        `image_id`: the digest the kubelet pulled (containerStatuses[].imageID)."""
        state: dict[str, Any] = {}
        if exit_code is not None:
            text = json.dumps(message) if isinstance(message, dict) else (message or "")
            state = {"terminated": {"exitCode": exit_code, "message": text,
                                    "reason": reason or ("Completed" if exit_code == 0 else "Error")}}
        elif waiting:
            state = {"waiting": {"reason": waiting, "message": f"{waiting}: simulated"}}
        elif phase == "Running":
            state = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        container = {"name": "main", "state": state, "image": "kuberl-trainer", "imageID": image_id,
                     "ready": phase == "Running", "restartCount": 0}
        status: dict[str, Any] = {"phase": phase, "containerStatuses": [container]}
        if ip:
            status["podIP"] = ip
        self.core.patch_namespaced_pod_status(name, namespace, {"status": status},
                                              _content_type="application/merge-patch+json", _preload_content=False)

    def created_count(self, namespace: str, plural: str, name: str, group: str = "") -> int:
        """How many times an object was created (ADDED events in the emulator's log)."""
        def count() -> int:
            return sum(1 for e in self.emulator.history.events
                       if e.type == "ADDED" and e.group == group and e.plural == plural
                       and e.obj["metadata"].get("namespace") == namespace and e.obj["metadata"]["name"] == name)
        return self.emulator_thread.call(count)
