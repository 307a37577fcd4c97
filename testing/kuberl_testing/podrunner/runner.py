"""`PodRunner`, the stand-in kubelet's loop: it observes the API's pods and Services, starts each pod
as a local process (translated by `localpod`), writes its status (`pod_status`) and stops the
processes of deleted pods, by process group and by a per-pod environment marker; never by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kuberl.api.contract import ENV_STATUS_HOST, ENV_STATUS_PORT, ENV_TERMINATION_LOG
from kuberl_testing.podrunner import localpod, pod_status
from kuberl_testing.podrunner.addresses import AddressPool
from kuberl_testing.podrunner.localpod import Endpoint, PodSetupError
from kuberl_testing.podrunner.loop import LoopThread
from kuberl_testing.ports import free_port
from kuberl_testing.process_tree import (
    MARKER_VARIABLE,
    processes_with_marker,
    start_process,
    stop_process_tree,
)

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass
class RunnerOptions:
    work_dir: Path | None = None            # pod directories go here (default: a fresh temp dir)
    third_octet: int | None = None          # pod addresses 127.0.X.N (default: random X)
    fixed_ports: dict[int, int] = field(default_factory=dict)   # container port -> the same local port for every pod
    extra_env: dict[str, str] = field(default_factory=dict)     # added to every pod (the pod's own env wins)
    unpullable_images: str | None = None    # regex: images that fail as ErrImagePull
    poll_seconds: float = 0.25
    max_grace_seconds: float = 10.0
    bin_dir: str = field(default_factory=lambda: os.path.dirname(sys.executable))
    node_name: str | None = None            # a real API server's node: run only the pods bound to it


@dataclass
class _Pod:
    uid: str
    namespace: str
    name: str
    state: str = "waiting"                  # waiting -> running -> finished
    ip: str | None = None
    holds_ip: bool = False
    ports: dict[int, int] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    directory: Path | None = None
    log_path: Path | None = None
    termination_path: Path | None = None
    started_at: str | None = None
    waiting: tuple[str, str] | None = None  # (reason, message) last written
    container: str = "main"
    unwritten: dict[str, Any] | None = None  # a status the API did not take yet (written again next pass)
    next_try: float = 0.0


class PodRunner:
    """Runs the API's pods as local processes until `stop()`."""

    def __init__(self, api_client: k8s.ApiClient, options: RunnerOptions | None = None):
        self.options = options or RunnerOptions()
        self._api = k8s.CoreV1Api(api_client)
        self._pool = AddressPool(self.options.third_octet)
        self._own_work_dir = self.options.work_dir is None
        self.work_dir = Path(self.options.work_dir or tempfile.mkdtemp(prefix="kpr-"))
        # Ray's unix sockets live under its temp dir and a socket path has at most 107 bytes.
        self._ray_dirs = Path(tempfile.mkdtemp(prefix="kpr", dir="/tmp"))
        self._pods: dict[str, _Pod] = {}
        self._lock = threading.RLock()
        self._loop = LoopThread(self._run, name="pod-runner")
        self._stoppers: list[threading.Thread] = []
        self._being_stopped: dict[str, _Pod] = {}  # deleted pods whose processes are being stopped
        self._logs: dict[str, Path] = {}
        self.errors: list[str] = []

    # -- lifecycle --

    def start(self) -> PodRunner:
        self._loop.start()
        return self

    def stop(self) -> None:
        """Stop the loop and every process the runner started."""
        self._loop.stop()
        with self._lock:
            pods = list(self._pods.values())
        for pod in pods:
            if pod.process is not None:
                stop_process_tree(pod.process, pod.marker)
        for stopper in self._stoppers:
            stopper.join(30)
        self._pool.close()

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._loop.stopping.is_set():
            try:
                self.step()
            except Exception as exc:  # the API may be briefly away; keep the pods running
                self.errors.append(repr(exc))
                del self.errors[:-50]
            self._loop.stopping.wait(self.options.poll_seconds)

    # -- what tests and e2e scenarios ask --

    def process_of(self, namespace: str, name: str) -> subprocess.Popen | None:
        """The main process of the pod's running container, if any."""
        with self._lock:
            for pod in self._pods.values():
                if (pod.namespace, pod.name) == (namespace, name) and pod.state == "running":
                    return pod.process
        return None

    def has_processes(self, namespace: str, name: str) -> bool:
        """Whether any process of the pod (or of a deleted pod of that name being stopped) is alive."""
        with self._lock:
            pods = [p for p in [*self._pods.values(), *self._being_stopped.values()]
                    if (p.namespace, p.name) == (namespace, name) and p.process is not None]
        return any(p.process.poll() is None or processes_with_marker(p.marker) for p in pods if p.process)

    def kill(self, namespace: str, name: str, sig: int = signal.SIGKILL) -> bool:
        """Signal the pod's main process (as a crash would); False if it is not running."""
        process = self.process_of(namespace, name)
        if process is None or process.poll() is not None:
            return False
        process.send_signal(sig)
        return True

    def log_paths(self, namespace: str | None = None) -> dict[str, Path]:
        """Log file of every pod started, deleted ones too (NS/NAME#uid-prefix -> path), for diagnostics."""
        with self._lock:
            return {key: path for key, path in self._logs.items() if namespace is None or key.startswith(namespace + "/")}

    # -- one pass --

    def step(self) -> None:
        """Observe pods and Services once; start, finish and stop pods accordingly."""
        node = self.options.node_name
        pods = self._list("list_pod_for_all_namespaces", **({"field_selector": f"spec.nodeName={node}"} if node else {}))
        services = self._list("list_service_for_all_namespaces")
        by_uid = {_uid(p): p for p in pods}
        with self._lock:
            if node:
                self._finish_unknown_deletions(pods)
            for pod in self._pods.values():
                if pod.unwritten is not None and pod.uid in by_uid:
                    self._write_status(pod, pod.unwritten)
            for uid, pod in list(self._pods.items()):
                body = by_uid.get(uid)
                if body is None or body["metadata"].get("deletionTimestamp"):
                    self._stop_deleted(pod, body)
                elif pod.state == "running" and pod.process is not None and pod.process.poll() is not None:
                    self._finish(pod, body)
            now = time.monotonic()
            for body in pods:
                uid = _uid(body)
                pod = self._pods.get(uid)
                if body["metadata"].get("deletionTimestamp") or (pod is not None and pod.state != "waiting"):
                    continue
                if (body.get("spec") or {}).get("schedulingGates"):
                    continue  # not schedulable until its gates are removed (Kueue's admission, say)
                if pod is None:
                    if (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
                        continue
                    pod = self._pods[uid] = _Pod(uid, body["metadata"].get("namespace", "default"),
                                                 body["metadata"]["name"])
                    if (body.get("status") or {}).get("podIP"):
                        self._fail_orphan(pod)
                        continue
                if now >= pod.next_try:
                    self._try_start(pod, body, pods, services)

    def _list(self, method: str, **selectors: str) -> list[dict[str, Any]]:
        response = getattr(self._api, method)(_preload_content=False, **selectors)
        return json.loads(response.data).get("items") or []

    def _finish_unknown_deletions(self, pods: list[dict[str, Any]]) -> None:
        """A deleted pod bound to this node that never ran here (or ended before) has no process to
        stop: confirm its deletion, as the kubelet does, or it stays Terminating."""
        for body in pods:
            meta = body["metadata"]
            uid = _uid(body)
            if meta.get("deletionTimestamp") and uid not in self._pods and uid not in self._being_stopped:
                self._confirm_deletion(meta["name"], meta.get("namespace", "default"), uid)

    def _confirm_deletion(self, name: str, namespace: str, uid: str) -> None:
        try:
            # the options go in the body only: with a body, the API server ignores the query's
            self._api.delete_namespaced_pod(name, namespace, _preload_content=False,
                                            body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone already, or a new pod of that name
                raise

    # -- starting --

    def _try_start(self, pod: _Pod, body: dict[str, Any], pods: list[dict[str, Any]],
                   services: list[dict[str, Any]]) -> None:
        try:
            self._start(pod, body, pods, services)
        except Exception as exc:
            if pod.state != "running":
                self._release(pod)  # retried on a later pass, with a fresh address
                pod.ip = None
            if not isinstance(exc, PodSetupError):
                raise
            pod.next_try = time.monotonic() + 1.0
            if exc.reason == "StandInUnsupported":
                pod.state = "finished"
                self._write_status(pod, _terminated_status(pod, 128, "StandInUnsupported", exc.message))
            elif pod.waiting != (exc.reason, exc.message):
                pod.waiting = (exc.reason, exc.message)
                self._write_status(pod, pod_status.waiting_status(pod.container, exc.reason, exc.message))

    def _start(self, pod: _Pod, body: dict[str, Any], pods: list[dict[str, Any]],
               services: list[dict[str, Any]]) -> None:
        containers = (body.get("spec") or {}).get("containers") or []
        if len(containers) != 1:
            raise PodSetupError("StandInUnsupported", f"the stand-in runs pods with one container, not {len(containers)}")
        container = containers[0]
        pod.container = str(container.get("name", "main"))
        image = str(container.get("image", ""))
        if self.options.unpullable_images and re.search(self.options.unpullable_images, image):
            raise PodSetupError("ErrImagePull", f'failed to pull image "{image}": not found')
        if not container.get("command"):
            raise PodSetupError("StandInUnsupported", "the stand-in needs container.command (it has no images)")
        secrets, config_maps = self._referenced_data(body)
        mounts = localpod.volume_files(body, container, secrets=secrets, config_maps=config_maps)
        hosts = self._hosts(pod.namespace, pods, services)
        # A Service name resolves wherever the pod meets it: its command, its env and the files mounted into it
        # (an experiment's spec.storage.endpoint reaches the trainer in a ConfigMap).
        files = [text for mounted in mounts.values() for text in mounted.values()]
        wanted = localpod.referenced_hosts(" ".join([*container.get("command", []), *container.get("args", []),
                                                     *(str(e.get("value", "")) for e in container.get("env") or []),
                                                     *files]),
                                           self._service_names(pod.namespace, services))
        missing = sorted(h for h in wanted if h not in hosts)
        if missing:
            raise PodSetupError("ContainerCreating", f"waiting for a running pod behind {', '.join(missing)}")
        pod.ip, pod.holds_ip = self._pool.acquire(), True
        pod.ports = localpod.plan_ports(container, self.options.fixed_ports, lambda: free_port(""))
        hosts[pod.ip] = Endpoint(pod.ip, pod.ports)
        env = localpod.resolve_env(body, container, pod_ip=pod.ip, secrets=secrets, config_maps=config_maps)
        mounts = {path: {name: localpod.rewrite_addresses(text, hosts) for name, text in mounted.items()}
                  for path, mounted in mounts.items()}
        pod.directory = self.work_dir / f"{pod.name[:40]}-{pod.uid[:8]}"
        paths = self._materialise(pod, mounts, container)
        argv = [*container.get("command", []), *container.get("args", [])]
        argv = [localpod.rewrite_addresses(localpod.rewrite_paths(localpod.expand_dependent_vars(a, env), paths),
                                           hosts) for a in argv]
        argv = localpod.rewrite_port_flags(argv, pod.ports)
        env = {k: localpod.rewrite_addresses(localpod.rewrite_paths(v, paths), hosts) for k, v in env.items()}
        env = {**self._base_env(pod), **self.options.extra_env, **env, **self._pinned_env(pod, env)}
        argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
        working_dir = container.get("workingDir")
        cwd = localpod.rewrite_paths(working_dir, paths) if working_dir else str(pod.directory)
        try:
            pod.process = start_process(argv, env, cwd, pod.log_path)
        except OSError as exc:
            raise PodSetupError("StandInUnsupported", f"cannot start {argv[0]!r}: {exc}") from exc
        pod.state, pod.started_at, pod.waiting = "running", pod_status.now(), None
        self._write_status(pod, pod_status.running_status(pod.container, pod.process.pid, pod.ip, pod.started_at))

    def _referenced_data(self, body: dict[str, Any]) -> tuple[dict[tuple[str, str], dict[str, str]],
                                                            dict[tuple[str, str], dict[str, str]]]:
        """The Secrets and ConfigMaps the pod names, read one by one (a node may read only those of its
        own pods, never list them); an absent one is left out, for `localpod` to report."""
        namespace = body["metadata"].get("namespace", "default")
        secret_names, map_names = localpod.referenced_objects(body)
        secrets = {(namespace, name): localpod.secret_values(found) for name in secret_names
                   if (found := self._read("read_namespaced_secret", name, namespace)) is not None}
        maps = {(namespace, name): dict(found.get("data") or {}) for name in map_names
                if (found := self._read("read_namespaced_config_map", name, namespace)) is not None}
        return secrets, maps

    def _read(self, method: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return json.loads(getattr(self._api, method)(name, namespace, _preload_content=False).data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:  # the Node authorizer learns of a new pod's references a moment later
                raise PodSetupError("ContainerCreating", f"not yet allowed to read {namespace}/{name}") from exc
            raise

    def _service_names(self, namespace: str, services: list[dict[str, Any]]) -> list[str]:
        return [host for s in services for host in localpod.service_hostnames(
            s["metadata"]["name"], s["metadata"].get("namespace", "default"), namespace)]

    def _hosts(self, namespace: str, pods: list[dict[str, Any]], services: list[dict[str, Any]]) -> dict[str, Endpoint]:
        """Every name and address a pod in `namespace` can reach, mapped to local endpoints."""
        running = {p.uid: p for p in self._pods.values() if p.state == "running" and p.ip}
        hosts = {p.ip: Endpoint(p.ip, p.ports) for p in running.values() if p.ip}
        for service in services:
            svc_ns = service["metadata"].get("namespace", "default")
            selector = (service.get("spec") or {}).get("selector")
            for body in pods:
                record = running.get(_uid(body))
                if record is None or record.namespace != svc_ns or record.ip is None:
                    continue
                if localpod.selector_matches(selector, body["metadata"].get("labels")):
                    endpoint = localpod.service_endpoint(service, body, Endpoint(record.ip, record.ports))
                    for host in localpod.service_hostnames(service["metadata"]["name"], svc_ns, namespace):
                        hosts[host] = endpoint
                    break
        return hosts

    def _materialise(self, pod: _Pod, mounts: dict[str, dict[str, str]], container: dict[str, Any]) -> dict[str, str]:
        assert pod.directory is not None
        pod.directory.mkdir(parents=True, exist_ok=True)
        for sub in ("home", "tmp"):
            (pod.directory / sub).mkdir(exist_ok=True)
        pod.log_path = pod.directory / "container.log"
        self._logs[f"{pod.namespace}/{pod.name}#{pod.uid[:8]}"] = pod.log_path
        pod.termination_path = pod.directory / "termination-log"
        pod.termination_path.write_text("")
        paths: dict[str, str] = {}
        for i, (mount_path, files) in enumerate(mounts.items()):
            local = pod.directory / "volumes" / str(i)
            local.mkdir(parents=True, exist_ok=True)
            for relative, text in files.items():
                target = local / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            paths[mount_path] = str(local)
        message_path = container.get("terminationMessagePath") or localpod.DEFAULT_TERMINATION_MESSAGE_PATH
        paths[message_path] = str(pod.termination_path)
        return paths

    def _base_env(self, pod: _Pod) -> dict[str, str]:
        assert pod.directory is not None
        return {
            "PATH": os.pathsep.join([self.options.bin_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOSTNAME": pod.name,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
        }

    def _pinned_env(self, pod: _Pod, env: Mapping[str, str]) -> dict[str, str]:
        """What only the stand-in knows: where this pod's files, address and ports are."""
        assert pod.directory is not None and pod.ip is not None
        pinned = {
            "HOME": str(pod.directory / "home"),
            "TMPDIR": str(pod.directory / "tmp"),
            "RAY_TMPDIR": str(self._ray_dir(pod)),
            ENV_STATUS_HOST: pod.ip,
            ENV_TERMINATION_LOG: str(pod.termination_path),
            MARKER_VARIABLE: pod.marker,
        }
        status_port = env.get(ENV_STATUS_PORT, "")
        if status_port.isdigit() and int(status_port) in pod.ports:
            pinned[ENV_STATUS_PORT] = str(pod.ports[int(status_port)])
        return pinned

    def _ray_dir(self, pod: _Pod) -> Path:
        path = self._ray_dirs / pod.uid[:8]
        path.mkdir(exist_ok=True)
        assert pod.directory is not None
        link = pod.directory / "ray"
        if not link.exists():
            link.symlink_to(path)
        return path

    def _fail_orphan(self, pod: _Pod) -> None:
        pod.state = "finished"
        self._write_status(pod, _terminated_status(pod, 137, "Error", "the stand-in lost this pod's process"))

    # -- finishing and stopping --

    def _finish(self, pod: _Pod, body: dict[str, Any]) -> None:
        assert pod.process is not None
        code = pod.process.returncode
        exit_code = code if code >= 0 else 128 - code
        stop_process_tree(pod.process, pod.marker)
        container = ((body.get("spec") or {}).get("containers") or [{}])[0]
        message = pod_status.termination_message(pod.termination_path, pod.log_path, exit_code,
                                                 container.get("terminationMessagePolicy", "File"))
        pod.state = "finished"
        self._release(pod)
        self._write_status(pod, _terminated_status(pod, exit_code, "Completed" if exit_code == 0 else "Error", message))

    def _stop_deleted(self, pod: _Pod, body: dict[str, Any] | None) -> None:
        del self._pods[pod.uid]
        self._being_stopped[pod.uid] = pod
        process = pod.process
        grace = 0.0
        if body is not None:
            spec_grace = (body.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            meta_grace = body["metadata"].get("deletionGracePeriodSeconds", spec_grace)
            grace = min(float(meta_grace or 0), self.options.max_grace_seconds)

        def stop() -> None:
            if process is not None:
                stop_process_tree(process, pod.marker, grace_seconds=grace)
            if body is not None:  # what the kubelet does once the containers are gone
                self._confirm_deletion(pod.name, pod.namespace, pod.uid)
            with self._lock:
                self._release(pod)
                self._being_stopped.pop(pod.uid, None)

        if process is None or process.poll() is not None:
            stop()
        else:
            stopper = threading.Thread(target=stop, name=f"stop-{pod.name}", daemon=True)
            stopper.start()
            self._stoppers = [t for t in self._stoppers if t.is_alive()] + [stopper]

    def _release(self, pod: _Pod) -> None:
        """Give the pod's address back, once (pod.ip stays for the status that reports the pod's end)."""
        if pod.ip is not None and pod.holds_ip:
            self._pool.release(pod.ip)
            pod.holds_ip = False

    def _write_status(self, pod: _Pod, status: dict[str, Any]) -> None:
        pod.unwritten = None
        try:
            self._api.patch_namespaced_pod_status(pod.name, pod.namespace, {"status": status},
                                                  _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:  # a pod deleted meanwhile needs no status
                pod.unwritten = status
                self.errors.append(f"status of {pod.namespace}/{pod.name}: {exc.status} {exc.reason}")
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # the API is away a moment; the next pass writes it
            pod.unwritten = status
            self.errors.append(f"status of {pod.namespace}/{pod.name}: {exc!r}")


def _uid(body: Mapping[str, Any]) -> str:
    meta = body["metadata"]
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}/{meta.get('creationTimestamp')}")


def api_client_from_kubeconfig(path: str | None = None) -> k8s.ApiClient:
    """An API client for the kubeconfig at `path` (or $KUBECONFIG)."""
    from kubernetes import config

    configuration = k8s.Configuration()
    config.load_kube_config(config_file=path, client_configuration=configuration)
    return k8s.ApiClient(configuration)


def _terminated_status(pod: _Pod, exit_code: int, reason: str, message: str) -> dict[str, Any]:
    return pod_status.terminated_status(pod.container, exit_code, reason, message, started_at=pod.started_at,
                                        ip=pod.ip)
