"""Ape-X soak: train for --minutes and sample the RSS of the driver and of every Ray process of this run.

Ape-X DQN on CartPole-v1 with 2 rollout workers and 2 replay shards trains without a stop (a
state snapshot every --snapshot-every iterations, as checkpoints take one). Every --interval
seconds the RSS of this process and of each process below it (the Ray node this run started:
GCS, raylet, and the actors, named by their `ray::Class` titles) is sampled with psutil. Prints
a table per role, the growth in MB/hour over the whole run and over its second half (after the
replay buffers have filled), and writes a PNG.

    .venv/bin/python bench/soak_apex.py --minutes 30 --plot docs/soak_apex.png --json /tmp/soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROLE_PATTERNS = (  # first match wins; actors show as `ray::Class` or `ray::Class.method`
    ("replay shard", re.compile(r"ray::ReplayShard")),
    ("learner", re.compile(r"ray::\w*Learner")),
    ("rollout worker", re.compile(r"ray::\w*RolloutWorker")),
    ("idle ray worker", re.compile(r"ray::IDLE")),
    ("ray agents", re.compile(r"ray::(DashboardAgent|RuntimeEnvAgent)")),
    ("raylet", re.compile(r"/raylet/raylet\b")),
    ("gcs", re.compile(r"/gcs_server\b")),
    ("ray monitors", re.compile(r"(dashboard|monitor|log_monitor)\.py")),
)


def role_of(cmdline: str) -> str:
    for role, pattern in ROLE_PATTERNS:
        if pattern.search(cmdline):
            return role
    return "other ray process"


def sample(psutil: Any) -> dict[tuple[str, int], float]:
    """{(role, pid): RSS MB} for this process and every process below it."""
    me = psutil.Process(os.getpid())
    found = {("driver", me.pid): me.memory_info().rss / 2**20}
    for child in me.children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline()) or child.name()
            found[(role_of(cmdline), child.pid)] = child.memory_info().rss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def growth_mb_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) points, in MB/hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    slope = sum((t - mean_t) * (m - mean_m) for t, m in points) / var
    return slope * 3600


def by_role(samples: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per role, (seconds, total RSS of the role's processes) at each sample."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        totals: dict[str, float] = defaultdict(float)
        for key, mb in s["rss"].items():
            totals[key.split("/")[0]] += mb
        for role, mb in totals.items():
            series[role].append((s["seconds"], mb))
    return dict(series)


def summarise(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    summary = {}
    half = samples[-1]["seconds"] / 2 if samples else 0
    for role, points in sorted(by_role(samples).items()):
        summary[role] = {
            "processes": max(sum(1 for k in s["rss"] if k.split("/")[0] == role) for s in samples),
            "start_mb": round(points[0][1], 1), "end_mb": round(points[-1][1], 1),
            "peak_mb": round(max(m for _, m in points), 1),
            "growth_mb_per_hour": _round(growth_mb_per_hour(points)),
            "second_half_growth_mb_per_hour": _round(growth_mb_per_hour([p for p in points if p[0] >= half])),
        }
    return summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def plot(samples: list[dict[str, Any]], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for role, points in sorted(by_role(samples).items()):
        ax.plot([t / 60 for t, _ in points], [m for _, m in points], marker=".", label=role)
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MB, all processes of the role)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=100_000, help="replay capacity (all shards)")
    parser.add_argument("--snapshot-every", type=int, default=50, help="iterations between state snapshots")
    parser.add_argument("--plot", metavar="PNG", help="write the RSS curves here")
    parser.add_argument("--json", metavar="PATH", help="write the samples and the summary here")
    args = parser.parse_args()

    from kuberl.trainer.algorithms.apex import ApexDQNConfig

    algo = (ApexDQNConfig().environment("CartPole-v1")
            .rollouts(workers=args.workers, envs_per_worker=8, fragment_length=32)
            .replay(shards=args.shards, capacity=args.capacity).debugging(seed=1).build())
    import psutil  # after Ray: Ray ships psutil among its third-party files

    samples: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    started = time.monotonic()
    next_sample = started
    iterations = 0
    try:
        while True:
            now = time.monotonic()
            if now >= next_sample:
                rss = {f"{role}/{pid}": round(mb, 1) for (role, pid), mb in sample(psutil).items()}
                samples.append({"seconds": round(now - started, 1), "timesteps": result.get("timesteps", 0),
                                "episodeReturnMean": result.get("episodeReturnMean"), "rss": rss})
                total = sum(rss.values())
                print(f"{(now - started) / 60:6.1f} min  {result.get('timesteps', 0):>10,} steps  "
                      f"return {result.get('episodeReturnMean') or 0:6.1f}  RSS total {total:7.1f} MB "
                      f"in {len(rss)} processes", flush=True)
                next_sample = now + args.interval
                if now - started >= args.minutes * 60:
                    break
            result = algo.train()
            iterations += 1
            if iterations % args.snapshot_every == 0:
                algo.get_state()  # what a checkpoint takes; dropped at once
    finally:
        algo.stop()

    summary = summarise(samples)
    print(f"\nApe-X soak: {args.workers} workers, {args.shards} shards, capacity {args.capacity:,}, "
          f"{samples[-1]['seconds'] / 60:.1f} min, {samples[-1]['timesteps']:,} env steps, {iterations} iterations")
    print(f"{'role':<20}{'procs':>6}{'start MB':>10}{'end MB':>9}{'peak MB':>9}{'MB/h':>8}{'MB/h 2nd half':>15}")
    for role, s in summary.items():
        print(f"{role:<20}{s['processes']:>6}{s['start_mb']:>10}{s['end_mb']:>9}{s['peak_mb']:>9}"
              f"{s['growth_mb_per_hour']!s:>8}{s['second_half_growth_mb_per_hour']!s:>15}")
    if args.plot and plot(samples, Path(args.plot), f"Ape-X soak: RSS by role ({args.workers} workers, "
                                                     f"{args.shards} shards, CartPole-v1)"):
        print(f"plot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
