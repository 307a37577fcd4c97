"""A whole-lifecycle load on the operator: N RLExperiments created, reporting progress, then deleted.

The API emulator and the operator run as separate processes (as in a cluster). No pods run: the
load writes pod phases and IPs as a kubelet would, and a few stand-in trainers on loopback
addresses answer the operator's polls of :PORT/status with an iteration that grows with time.
The figures: apply -> all children (p50/p99), pods Running -> experiment Running, how far
behind the trainers' progress .status is (measured three times: a backlog would make it grow),
delete -> all children gone, the operator's RSS at each phase, and reconcile durations from
its Prometheus histogram. Used by tests/integration/test_operator_load.py and
bench/operator_lifecycle.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp

from kuberl_testing.ports import free_port

NAMESPACE = "load"
CHILD_PATHS = {
    "pods": "/api/v1/namespaces/{ns}/pods",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "services": "/api/v1/namespaces/{ns}/services",
    "secrets": "/api/v1/namespaces/{ns}/secrets",
    "networkpolicies": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
}
EXPERIMENTS_PATH = f"/apis/kuberl.io/v1alpha1/namespaces/{NAMESPACE}/rlexperiments"
API_CONCURRENCY = 32


def experiment(name: str, workers: int) -> dict[str, Any]:
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": name},
            "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 10_000_000},
                     "storage": {"uri": "s3://load-bucket/runs"}, "workers": {"replicas": workers}}}


def children(name: str, workers: int) -> set[tuple[str, str]]:
    pods = {("pods", f"{name}-head")} | {("pods", f"{name}-worker-{i}") for i in range(workers)}
    return pods | {("configmaps", f"{name}-config"), ("services", f"{name}-head"),
                   ("secrets", f"{name}-ray-token"), ("networkpolicies", f"{name}-ray")}


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of values, inclusive method; None for no values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def histogram_quantile(text: str, metric: str, q: float) -> float | str | None:
    """The upper bound of the bucket holding the q-quantile of a Prometheus histogram (text format);
    beyond the largest bound, ">BOUND" (JSON has no infinity)."""
    buckets = []
    for match in re.finditer(rf'^{metric}_bucket{{le="([^"]+)"}} ([0-9.e+]+)$', text, re.MULTILINE):
        buckets.append((float(match[1]), float(match[2])))
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    bound = next(le for le, count in buckets if count >= q * total)
    return bound if math.isfinite(bound) else f">{buckets[-2][0]:g}"


def histogram_count(text: str, metric: str) -> int:
    match = re.search(rf"^{metric}_count ([0-9.e+]+)$", text, re.MULTILINE)
    return int(float(match[1])) if match else 0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class RssSampler:
    """The RSS of one process every `interval` seconds, in a thread: peak and last."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, RuntimeError):
                self.samples.append(rss_mb(self.pid))
            self._stop.wait(self.interval)

    def now(self) -> float:
        return round(rss_mb(self.pid), 1)

    @property
    def peak(self) -> float:
        return round(max(self.samples, default=0.0), 1)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class StandInTrainers:
    """`count` HTTP servers on 127.0.0.{first}.. answering GET /status like a training head whose
    iteration grows by `rate` per second."""

    def __init__(self, count: int, port: int, first: int = 60, rate: float = 4.0) -> None:
        self.port, self.rate = port, rate
        self.started = time.monotonic()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                iteration = outer.iteration()
                body = json.dumps({"phase": "Running", "attempt": 1, "iteration": iteration,
                                   "timesteps": iteration * 128, "episodeReturnMean": 20.0 + iteration % 100,
                                   "lastCheckpoint": None}).encode()
                self.send_response(200 if self.path == "/status" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.ips = [f"127.0.0.{first + i}" for i in range(count)]
        self._servers = [ThreadingHTTPServer((ip, port), Handler) for ip in self.ips]
        for server in self._servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def iteration(self) -> int:
        return 1 + int((time.monotonic() - self.started) * self.rate)

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()


async def watch_children(session: aiohttp.ClientSession, seen: dict[tuple[str, str], float],
                          gone: dict[tuple[str, str], float], ready: asyncio.Event) -> None:
    async def one(kind: str, path: str) -> None:
        async with session.get(path.format(ns=NAMESPACE), params={"watch": "true"},
                               timeout=aiohttp.ClientTimeout(total=None)) as resp:
            ready.set()
            async for line in resp.content:
                if line.strip():
                    event = json.loads(line)
                    key = (kind, event["object"]["metadata"]["name"])
                    if event["type"] == "ADDED":
                        seen.setdefault(key, time.perf_counter())
                    elif event["type"] == "DELETED":
                        gone[key] = time.perf_counter()

    await asyncio.gather(*(one(kind, path) for kind, path in CHILD_PATHS.items()))


async def _statuses(session: aiohttp.ClientSession) -> dict[str, dict[str, Any]]:
    async with session.get(EXPERIMENTS_PATH) as resp:
        items = (await resp.json())["items"]
    return {item["metadata"]["name"]: item.get("status") or {} for item in items}


async def _wait(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(interval)
    return False


async def _set_pod_running(session: aiohttp.ClientSession, name: str, ip: str) -> None:
    container = {"name": "main", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "ready": True,
                 "image": "kuberl-trainer", "imageID": "", "restartCount": 0}
    body = {"status": {"phase": "Running", "podIP": ip, "containerStatuses": [container]}}
    async with session.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status", data=json.dumps(body),
                             headers={"Content-Type": "application/merge-patch+json"}) as resp:
        assert resp.status == 200, await resp.text()


def _seconds(values: list[float]) -> dict[str, float | None]:
    values = sorted(values)
    rounded = {"p50": quantile(values, 0.5), "p99": quantile(values, 0.99), "max": values[-1] if values else None}
    return {k: None if v is None else round(v, 3) for k, v in rounded.items()}


async def run_lifecycle(url: str, operator_pid: int, metrics_port: int, trainers: StandInTrainers, count: int,
                        workers: int, poll_seconds: float, timeout: float) -> dict[str, Any]:
    """Create `count` experiments, run them (pods Running, progress polled), delete them; the figures."""
    seen: dict[tuple[str, str], float] = {}
    gone: dict[tuple[str, str], float] = {}
    names = [f"exp-{i:04d}" for i in range(count)]
    wanted = {name: children(name, workers) for name in names}
    every_child = set().union(*wanted.values())
    figures: dict[str, Any] = {"experiments": count, "workers_each": workers, "status_poll_seconds": poll_seconds}
    limit = asyncio.Semaphore(API_CONCURRENCY)
    connector = aiohttp.TCPConnector(limit=API_CONCURRENCY * 2)
    with RssSampler(operator_pid) as rss:
        async with aiohttp.ClientSession(url, connector=connector) as session:
            ready = asyncio.Event()
            watcher = asyncio.create_task(watch_children(session, seen, gone, ready))
            await ready.wait()
            figures["rss_mb_idle"] = rss.now()

            # 1. create, as one burst
            applied: dict[str, float] = {}

            async def apply(name: str) -> None:
                async with limit, session.post(EXPERIMENTS_PATH, json=experiment(name, workers)) as resp:
                    assert resp.status == 201, await resp.text()
                applied[name] = time.perf_counter()

            started = time.perf_counter()
            await asyncio.gather(*(apply(n) for n in names))

            async def all_children() -> bool:
                return every_child <= seen.keys()

            created = await _wait(all_children, timeout)
            figures["created_seconds"] = round(time.perf_counter() - started, 2)
            figures["with_all_children"] = sum(1 for n in names if wanted[n] <= seen.keys())
            figures["apply_to_children_seconds"] = _seconds(
                [max(seen[c] for c in wanted[n]) - applied[n] for n in names if wanted[n] <= seen.keys()])
            figures["rss_mb_created"] = rss.now()
            if not created:
                watcher.cancel()
                return figures

            # 2. the kubelet's part: every pod Running, each head on a stand-in trainer's address
            running_at: dict[str, float] = {}

            async def run(i: int, name: str) -> None:
                async with limit:
                    for w in range(workers):
                        await _set_pod_running(session, f"{name}-worker-{w}", f"10.1.{i // 250}.{i % 250}")
                    await _set_pod_running(session, f"{name}-head", trainers.ips[i % len(trainers.ips)])
                running_at[name] = time.perf_counter()

            await asyncio.gather(*(run(i, n) for i, n in enumerate(names)))
            became_running: dict[str, float] = {}

            async def all_running() -> bool:
                statuses = await _statuses(session)
                now = time.perf_counter()
                for name, status in statuses.items():
                    if status.get("phase") == "Running":
                        became_running.setdefault(name, now)
                return len(became_running) == count

            await _wait(all_running, timeout, interval=0.25)
            figures["running"] = len(became_running)
            figures["pods_running_to_phase_running_seconds"] = _seconds(
                [became_running[n] - running_at[n] for n in became_running])

            # 3. progress: how long until every .status shows an iteration the trainers had reached
            lags = []
            for _ in range(3):
                target = trainers.iteration() + 1  # one no status can show yet
                asked = time.perf_counter()

                async def caught_up(target: int = target) -> bool:
                    statuses = await _statuses(session)
                    return all((s.get("iteration") or 0) >= target for s in statuses.values())

                ok = await _wait(caught_up, timeout, interval=0.25)
                lags.append(round(time.perf_counter() - asked, 2) if ok else None)
            figures["progress_lag_seconds"] = lags
            figures["rss_mb_running"] = rss.now()
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
                metrics = resp.read().decode()

            # 4. delete everything: the children go with their owners
            deleted = time.perf_counter()

            async def delete(name: str) -> None:
                async with limit, session.delete(f"{EXPERIMENTS_PATH}/{name}") as resp:
                    assert resp.status in (200, 202), await resp.text()

            await asyncio.gather(*(delete(n) for n in names))

            async def all_gone() -> bool:
                return every_child <= gone.keys() and not await _statuses(session)

            figures["all_gone"] = await _wait(all_gone, timeout)
            figures["delete_seconds"] = round(time.perf_counter() - deleted, 2)
            figures["left_over_children"] = len(every_child - gone.keys())
            await asyncio.sleep(2.0)  # the operator forgets what it knew of them
            figures["rss_mb_deleted"] = rss.now()
            watcher.cancel()
        figures["rss_mb_peak"] = rss.peak
    metric = "kuberl_operator_reconcile_duration_seconds"
    figures["reconciles"] = histogram_count(metrics, metric)
    figures["reconcile_seconds_p50_bucket"] = histogram_quantile(metrics, metric, 0.5)
    figures["reconcile_seconds_p99_bucket"] = histogram_quantile(metrics, metric, 0.99)
    figures["load_average"] = round(os.getloadavg()[0], 1)
    return figures


@contextlib.contextmanager
def emulator_and_operator(poll_seconds: float, status_port: int) -> Iterator[tuple[str, int, int, int]]:
    """The API emulator and the operator (watching NAMESPACE) as processes; (API URL, operator PID,
    metrics port, emulator PID), once the operator answers its health probe."""
    with tempfile.TemporaryDirectory(prefix="kuberl-load-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        emulator = subprocess.Popen([sys.executable, "-m", "kuberl_testing.apiserver", "--kubeconfig",
                                     str(kubeconfig)], stdout=subprocess.PIPE, text=True)
        operator = None
        log = open(Path(tmp) / "operator.log", "w")  # noqa: SIM115 - closed below
        try:
            assert emulator.stdout is not None
            url = emulator.stdout.readline().strip()
            env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBERL_LISTEN_HOST": "127.0.0.1",
                   "KUBERL_PEERING": "off", "KUBERL_STATUS_POLL_SECONDS": str(poll_seconds),
                   "KUBERL_STATUS_PORT": str(status_port)}
            health_port, metrics_port = free_port(), free_port()
            operator = subprocess.Popen([sys.executable, "-m", "kuberl.operator", "--namespace", NAMESPACE,
                                         "--metrics-port", str(metrics_port), "--health-port", str(health_port)],
                                        env=env, stdout=log, stderr=subprocess.STDOUT)
            _wait_healthy(health_port, operator, Path(tmp) / "operator.log")
            yield url, operator.pid, metrics_port, emulator.pid
        finally:
            for proc in (operator, emulator):
                if proc is not None:
                    proc.terminate()
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
            log.close()


def _wait_healthy(port: int, operator: subprocess.Popen, log_path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if operator.poll() is not None:
            raise RuntimeError(f"the operator exited:\n{log_path.read_text()[-3000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                                                  timeout=1) as resp:
            if resp.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError("the operator did not become healthy")


def lifecycle_load(count: int, workers: int = 1, poll_seconds: float = 2.0, trainers: int = 8,
                   timeout: float = 120.0) -> dict[str, Any]:
    """Run the whole load once (start-up not counted); the figures."""
    status_port = free_port("127.0.0.60")
    stand_ins = StandInTrainers(trainers, status_port)
    try:
        with emulator_and_operator(poll_seconds, status_port) as (url, operator_pid, metrics_port, _):
            return asyncio.run(run_lifecycle(url, operator_pid, metrics_port, stand_ins, count, workers,
                                             poll_seconds, timeout))
    finally:
        stand_ins.close()
