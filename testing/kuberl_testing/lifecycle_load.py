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
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from kuberl_testing.measure import RssSampler, histogram_count, histogram_quantile, quantile
from kuberl_testing.ports import free_port
from kuberl_testing.stand_in_trainers import StandInTrainers

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
