"""Operator benchmark: apply N RLExperiments to the API emulator, time apply -> all children created.

Runs the emulator and the operator as separate processes (as in a cluster), applies the
experiments over HTTP, and watches the API for the children (head and worker pods, ConfigMap,
Service, Secret, NetworkPolicy). Prints p50/p99/max latency and the operator's RSS, and the CPU (--json:
cpu_model, cpu_bf16: native bfloat16, cpu_flags).
Targets (issue 5): p99 < 1 s, RSS < 150 MB.

    .venv/bin/python bench/operator_load.py --experiments 100 --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import aiohttp

from kuberl.trainer.cpu import cpu_caption, cpu_summary
from kuberl_testing.lifecycle_load import (
    EXPERIMENTS_PATH,
    children,
    emulator_and_operator,
    experiment,
    watch_children,
)
from kuberl_testing.measure import peak_rss_mb, quantile, rss_mb


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _apply(session: aiohttp.ClientSession, base: str, name: str, workers: int,
                 applied: dict[str, float]) -> None:
    async with session.post(base, json=experiment(name, workers)) as resp:
        assert resp.status == 201, await resp.text()
    applied[name] = time.perf_counter()


async def run_bench(url: str, operator_pid: int, emulator_pid: int, count: int, workers: int, interval: float,
                    timeout: float, rounds: int, sequential: bool = False) -> dict:
    """Apply `count` experiments per round; with several rounds, delete them between rounds (churn)."""
    seen: dict[tuple[str, str], float] = {}
    gone: dict[tuple[str, str], float] = {}
    latencies: list[float] = []
    deletions: list[float] = []
    rss_rounds: list[float] = []
    round_p99: list[float | None] = []
    base = EXPERIMENTS_PATH
    async with aiohttp.ClientSession(url) as session:
        ready = asyncio.Event()
        watcher = asyncio.create_task(watch_children(session, seen, gone, ready))
        await ready.wait()
        await asyncio.sleep(0.5)
        rss_before = rss_mb(operator_pid)
        cpu_before = cpu_seconds(operator_pid), cpu_seconds(emulator_pid)
        started = time.perf_counter()
        for round_ in range(rounds):
            applied: dict[str, float] = {}

            tasks = []
            for i in range(count):
                name = f"exp-{round_:02d}-{i:04d}"
                if sequential:  # as `kubectl apply -f dir/` does: the next once the API answered
                    await _apply(session, base, name, workers, applied)
                    continue
                tasks.append(asyncio.create_task(_apply(session, base, name, workers, applied)))
                if interval:
                    await asyncio.sleep(interval)
            await asyncio.gather(*tasks)
            wanted = {name: children(name, workers) for name in applied}
            deadline = time.perf_counter() + timeout
            while time.perf_counter() < deadline and not all(w <= seen.keys() for w in wanted.values()):
                await asyncio.sleep(0.05)
            this_round = sorted(max(seen[c] for c in wanted[n]) - applied[n] for n in applied if wanted[n] <= seen.keys())
            latencies += this_round
            round_p99.append(round(this_round[int(0.99 * (len(this_round) - 1))], 2) if this_round else None)
            if rounds > 1:
                deleted_at = time.perf_counter()
                await asyncio.gather(*(session.delete(f"{base}/{name}") for name in applied))
                every_child = set().union(*wanted.values())
                while time.perf_counter() < deadline + timeout and not every_child <= gone.keys():
                    await asyncio.sleep(0.05)
                deletions.append(max(gone.get(c, time.perf_counter()) for c in every_child) - deleted_at)
            rss_rounds.append(round(rss_mb(operator_pid), 1))
        total = time.perf_counter() - started
        async with session.get("/_emulator/requests") as resp:
            requests = await resp.json()
        rss_after, rss_peak = rss_mb(operator_pid), peak_rss_mb(operator_pid)
        cpu_operator = cpu_seconds(operator_pid) - cpu_before[0]
        cpu_emulator = cpu_seconds(emulator_pid) - cpu_before[1]
        watcher.cancel()
    latencies.sort()
    done = len(latencies)
    return {"experiments": count * rounds, "rounds": rounds, "workers_each": workers, "complete": done,
            "total_seconds": round(total, 2),
            "p50_seconds": round(quantile(latencies, 0.5), 3) if done else None,
            "p99_seconds": round(quantile(latencies, 0.99), 3) if done else None,
            "max_seconds": round(latencies[-1], 3) if done else None,
            "delete_seconds_per_round": [round(d, 2) for d in deletions], "p99_seconds_per_round": round_p99,
            "operator_rss_mb_before": round(rss_before, 1), "operator_rss_mb_after": round(rss_after, 1),
            "operator_rss_mb_peak": round(rss_peak, 1), "operator_rss_mb_per_round": rss_rounds,
            "operator_cpu_seconds": round(cpu_operator, 2), "emulator_cpu_seconds": round(cpu_emulator, 2),
            "load_average": os.getloadavg()[0],
            "api_requests": dict(sorted(requests.items(), key=lambda kv: -kv[1]))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="worker pods per experiment")
    parser.add_argument("--interval", type=float, default=0.0, help="seconds between applies (0: one burst)")
    parser.add_argument("--sequential", action="store_true",
                        help="apply one after another, each once the API answered (as kubectl apply -f dir/)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="apply/delete rounds (churn: memory must not grow from round to round)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    args = parser.parse_args()

    # start-up (imports, login) is not part of the figures: they start once the operator is healthy
    with emulator_and_operator(poll_seconds=30, status_port=8080) as (url, operator_pid, _, emulator_pid):
        figures = asyncio.run(run_bench(url, operator_pid, emulator_pid, args.experiments, args.workers,
                                        args.interval, args.timeout, args.rounds, args.sequential))
    figures.update(cpu_summary())
    print(f"operator bench: {figures['experiments']} experiments x (head + {figures['workers_each']} workers "
          f"+ 4 objects), {figures['complete']} complete in {figures['total_seconds']} s; {cpu_caption(figures)}")
    print(f"  apply -> all children created: p50 {figures['p50_seconds']} s, p99 {figures['p99_seconds']} s, "
          f"max {figures['max_seconds']} s  (target p99 < 1 s)")
    print(f"  operator RSS: {figures['operator_rss_mb_before']} MB idle, {figures['operator_rss_mb_after']} MB "
          f"after, {figures['operator_rss_mb_peak']} MB peak  (target < 150 MB)")
    print(f"  CPU during the run: operator {figures['operator_cpu_seconds']} s, "
          f"emulator {figures['emulator_cpu_seconds']} s; machine load average {figures['load_average']:.1f}")
    print(f"  API requests (all clients, bench included): {figures['api_requests']}")
    if figures["rounds"] > 1:
        print(f"  churn: p99 per round {figures['p99_seconds_per_round']} s; "
              f"delete -> children gone per round {figures['delete_seconds_per_round']} s; "
              f"operator RSS after each round {figures['operator_rss_mb_per_round']} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if figures["complete"] == figures["experiments"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
