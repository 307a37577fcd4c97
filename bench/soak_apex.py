"""Ape-X soak: train for --minutes and sample the RSS of the driver and of every Ray process of this run.

Ape-X DQN (CartPole-v1 by default, or --env with --preprocessing, e.g. ALE/Pong-v5 with atari) with
2 rollout workers and 2 replay shards trains without a stop (a state snapshot every
--snapshot-every iterations, as checkpoints take one). Every --interval seconds the RSS of this
process and of each process below it (the Ray node this run started: GCS, raylet, and the actors,
named by their `ray::Class` titles) is sampled with psutil, with its anonymous and shared-memory
parts (/proc/PID/status), and the object store's shared-memory file once (the pages allocated in
it, which every process that touches an object also counts in its own RSS). Prints a table per
role and per process, the growth in MB/hour over the whole run and over its second half (after the
replay buffers have filled), whether each process's private memory is flat, and writes a PNG. The summary
names the CPU; --json carries it (cpu_model, cpu_bf16: native bfloat16, cpu_flags).

--diagnose asks the learner actor at every sample (through Ray's `__ray_call__`) for glibc's heap
(in use, free, arenas), its threads, the references in Ray's table, its Python objects by type and,
with --trace, tracemalloc's growing allocation sites: a leak grows the heap in use, allocator
retention only its free lists. --worker-env changes the Ray workers' environment (kuberl's
WORKER_ENV_VARS, the malloc settings) to compare.

    .venv/bin/python bench/soak_apex.py --minutes 30 --plot docs/soak_apex.png --json /tmp/soak.json
    .venv/bin/python bench/soak_apex.py --minutes 8 --diagnose --trim --worker-env MALLOC_MMAP_THRESHOLD_=
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

from kuberl.trainer.cpu import cpu_caption, cpu_summary

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


def rss_parts(pid: int) -> dict[str, float] | None:
    """RSS split as the kernel counts it (MB): anonymous (the heap), file-backed, and shared memory.

    Pages of Ray's object store (shared memory) that a process has read count in its RSS too.
    """
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    parts = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssFile", "RssShmem"):
            parts[name[3:].lower()] = round(int(value.split()[0]) / 1024, 1)
    return parts or None


def object_store_mb(pids: list[int]) -> dict[str, float] | None:
    """The object store's memory, counted once: the pages of its shared-memory file that are allocated.

    Ray's plasma store is a file in /dev/shm, unlinked, that the raylet holds open; tmpfs allocates a
    page the first time any process touches it, and every process that reads or writes an object maps
    those pages into its own RSS as well. So the sum of the processes' shared pages counts the store
    many times over; this is its real cost, bounded by its capacity.
    """
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if "/dev/shm/plasma" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    return {"allocated": round(st.st_blocks * 512 / 2**20, 1), "capacity": round(st.st_size / 2**20)}
            except OSError:
                continue
    return None


def probe(actor: Any, *, trace: bool = False, baseline: bool = False, trim: bool = False, top: int = 12) -> dict[str, Any]:
    """Run inside an actor (`__ray_call__`): glibc's heap, Ray's reference table, Python objects by type and,
    with `trace`, tracemalloc's top allocation sites grown since the baseline snapshot."""
    import collections
    import ctypes
    import gc
    import tracemalloc

    import ray

    def rss_mb() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def arenas(libc: Any) -> int:
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".xml") as f:
            stream = libc.fopen(f.name.encode(), b"w")
            libc.malloc_info(0, stream)
            libc.fclose(stream)
            return Path(f.name).read_text().count("<heap nr=")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    info = libc.mallinfo2()
    refs = ray._private.worker.global_worker.core_worker.get_all_reference_counts()
    out: dict[str, Any] = {
        "rssMB": round(rss_mb(), 1),
        "mallocArenaMB": round(info.arena / 2**20, 1), "mallocMmapMB": round(info.hblkhd / 2**20, 1),
        "mallocInUseMB": round(info.uordblks / 2**20, 1), "mallocFreeMB": round(info.fordblks / 2**20, 1),
        "threads": len(os.listdir("/proc/self/task")), "mallocArenas": arenas(libc),
        "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX"), "rayRefs": len(refs),
        "rayRefsBorrowed": sum(1 for r in refs.values() if r.get("local", 0) == 0 and r.get("submitted", 0) == 0),
    }
    state = actor.__dict__.setdefault("_soak_probe", {})
    counts = collections.Counter(type(o).__name__ for o in gc.get_objects())
    out["gcObjects"] = sum(counts.values())
    if "types" not in state or baseline:
        state["types"] = counts
    grown = counts - state["types"]
    out["typesGrown"] = dict(grown.most_common(top))
    if trace:
        if not tracemalloc.is_tracing():
            tracemalloc.start(8)
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        if "snapshot" not in state or baseline:
            state["snapshot"] = snapshot
        out["tracedMB"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
        out["sitesGrown"] = [
            {"kB": round(d.size_diff / 1024, 1), "count": d.count_diff,
             "where": " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in d.traceback[:4])}
            for d in snapshot.compare_to(state["snapshot"], "traceback")[:top] if d.size_diff > 0
        ]
    if trim:
        before = rss_mb()
        libc.malloc_trim(0)
        out["trimmedMB"] = round(before - rss_mb(), 1)
    return out


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


def by_process(samples: list[dict[str, Any]], field: str = "rss") -> dict[str, list[tuple[float, float]]]:
    """Per process ("role/pid"), (seconds, MB) at each sample; `field` "rss" or a part of it ("anon", "shmem")."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        for key, mb in s["rss"].items():
            value = mb if field == "rss" else (s.get("parts", {}).get(key) or {}).get(field)
            if value is not None:
                series[key].append((s["seconds"], value))
    return dict(series)


def growth_of(points: list[tuple[float, float]], half: float) -> dict[str, Any]:
    return {
        "start_mb": round(points[0][1], 1), "end_mb": round(points[-1][1], 1),
        "peak_mb": round(max(m for _, m in points), 1),
        "growth_mb_per_hour": _round(growth_mb_per_hour(points)),
        "second_half_growth_mb_per_hour": _round(growth_mb_per_hour([p for p in points if p[0] >= half])),
    }


def summarise(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    summary = {}
    half = samples[-1]["seconds"] / 2 if samples else 0
    for role, points in sorted(by_role(samples).items()):
        summary[role] = {
            "processes": max(sum(1 for k in s["rss"] if k.split("/")[0] == role) for s in samples),
            **growth_of(points, half),
        }
    return summary


def summarise_processes(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per process: RSS growth, and that of its anonymous memory (heap) and of its shared (object store) pages."""
    half = samples[-1]["seconds"] / 2 if samples else 0
    summary: dict[str, dict[str, Any]] = {}
    for field in ("rss", "anon", "shmem"):
        for key, points in sorted(by_process(samples, field).items()):
            if len(points) >= 3:
                summary.setdefault(key, {})[field] = growth_of(points, half)
    return summary


FLAT_MB_PER_HOUR = 5.0


def flat_private(processes: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Per process: whether its private (anonymous) memory grew at most FLAT_MB_PER_HOUR in the second half."""
    return {key: (s["anon"]["second_half_growth_mb_per_hour"] or 0.0) <= FLAT_MB_PER_HOUR
            for key, s in processes.items() if "anon" in s}


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


def build_algorithm(args: argparse.Namespace) -> Any:
    from kuberl.trainer.algorithms.apex import ApexDQNConfig

    config = (ApexDQNConfig().environment(args.env, preprocessing=args.preprocessing)
              .rollouts(workers=args.workers, envs_per_worker=args.envs_per_worker, fragment_length=args.fragment)
              .replay(shards=args.shards, capacity=args.capacity).debugging(seed=1))
    if args.set:
        config.training(**{k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)})
    return config.build()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--preprocessing", default=None, help="env.preprocessing, e.g. atari")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs-per-worker", type=int, default=8)
    parser.add_argument("--fragment", type=int, default=32, help="rollouts.fragmentLength")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=100_000, help="replay capacity (all shards)")
    parser.add_argument("--set", action="append", metavar="NAME=JSON",
                        help="a hyperparameter (snake_case), e.g. --set train_batch_size=32; repeatable")
    parser.add_argument("--snapshot-every", type=int, default=50, help="iterations between state snapshots")
    parser.add_argument("--diagnose", action="store_true",
                        help="probe the learner actor at every sample: glibc heap, Ray references, objects by type")
    parser.add_argument("--trace", action="store_true", help="with --diagnose: tracemalloc's growing sites too")
    parser.add_argument("--baseline-minutes", type=float, default=3.0,
                        help="with --diagnose: compare with the probe taken this long into the run")
    parser.add_argument("--trim", action="store_true", help="with --diagnose: malloc_trim(0) the learner at the end")
    parser.add_argument("--worker-env", action="append", metavar="NAME=VALUE",
                        help="an environment variable for the Ray workers instead of kuberl's WORKER_ENV_VARS "
                             "(malloc settings, say); repeatable; NAME= alone drops one")
    parser.add_argument("--plot", metavar="PNG", help="write the RSS curves here")
    parser.add_argument("--json", metavar="PATH", help="write the samples and the summary here")
    args = parser.parse_args()

    if args.worker_env:
        from kuberl.trainer.distributed import ray_runtime

        for item in args.worker_env:
            name, _, value = item.partition("=")
            if value:
                ray_runtime.WORKER_ENV_VARS[name] = value
            else:
                ray_runtime.WORKER_ENV_VARS.pop(name, None)
    algo = build_algorithm(args)
    import psutil  # after Ray: Ray ships psutil among its third-party files
    import ray

    samples: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    started = time.monotonic()
    next_sample = started
    iterations = 0
    baseline_taken = False
    try:
        while True:
            now = time.monotonic()
            if now >= next_sample:
                found = sample(psutil)
                rss = {f"{role}/{pid}": round(mb, 1) for (role, pid), mb in found.items()}
                parts = {f"{role}/{pid}": rss_parts(pid) for role, pid in found}
                point: dict[str, Any] = {"seconds": round(now - started, 1), "timesteps": result.get("timesteps", 0),
                                         "episodeReturnMean": result.get("episodeReturnMean"), "rss": rss,
                                         "learnerUpdates": (result.get("learner") or {}).get("updates"),
                                         "parts": parts, "load": os.getloadavg()[0],
                                         "objectStore": object_store_mb([pid for role, pid in found
                                                                         if role == "raylet"])}
                last = now - started >= args.minutes * 60
                if args.diagnose:
                    baseline = not baseline_taken and now - started >= args.baseline_minutes * 60
                    baseline_taken = baseline_taken or baseline
                    point["learnerProbe"] = ray.get(algo.learner.__ray_call__.remote(
                        probe, trace=args.trace, baseline=baseline, trim=args.trim and last), timeout=300)
                samples.append(point)
                total = sum(rss.values())
                learner = next((k for k in rss if k.startswith("learner/")), None)
                extra = ""
                if learner and parts.get(learner):
                    extra = f"  learner {rss[learner]:.0f} MB (anon {parts[learner]['anon']:.0f}, " \
                            f"shmem {parts[learner]['shmem']:.0f})"
                if "learnerProbe" in point:
                    lp = point["learnerProbe"]
                    extra += (f" heap in use {lp['mallocInUseMB']} free {lp['mallocFreeMB']} refs {lp['rayRefs']} "
                              f"objs {lp['gcObjects']}")
                print(f"{(now - started) / 60:6.1f} min  {result.get('timesteps', 0):>10,} steps  "
                      f"return {result.get('episodeReturnMean') or 0:6.1f}  RSS total {total:7.1f} MB "
                      f"in {len(rss)} processes{extra}", flush=True)
                next_sample = now + args.interval
                if last:
                    break
            result = algo.train()
            iterations += 1
            if iterations % args.snapshot_every == 0:
                algo.get_state()  # what a checkpoint takes; dropped at once
    finally:
        algo.stop()

    summary = summarise(samples)
    processes = summarise_processes(samples)
    run = (f"{args.env}, {args.workers} workers, {args.shards} shards, capacity {args.capacity:,}, "
           f"{samples[-1]['seconds'] / 60:.1f} min, {samples[-1]['timesteps']:,} env steps, {iterations} iterations")
    print(f"\nApe-X soak: {run}; {cpu_caption()}")
    print(f"{'role':<20}{'procs':>6}{'start MB':>10}{'end MB':>9}{'peak MB':>9}{'MB/h':>8}{'MB/h 2nd half':>15}")
    for role, s in summary.items():
        print(f"{role:<20}{s['processes']:>6}{s['start_mb']:>10}{s['end_mb']:>9}{s['peak_mb']:>9}"
              f"{s['growth_mb_per_hour']!s:>8}{s['second_half_growth_mb_per_hour']!s:>15}")
    print(f"\n{'process':<28}{'start MB':>10}{'end MB':>9}{'MB/h':>8}{'2nd half':>10}{'anon MB/h':>11}"
          f"{'2nd half':>10}{'shmem MB/h':>12}")
    for key, s in processes.items():
        anon, shmem = s.get("anon", {}), s.get("shmem", {})
        print(f"{key:<28}{s['rss']['start_mb']:>10}{s['rss']['end_mb']:>9}{s['rss']['growth_mb_per_hour']!s:>8}"
              f"{s['rss']['second_half_growth_mb_per_hour']!s:>10}{anon.get('growth_mb_per_hour')!s:>11}"
              f"{anon.get('second_half_growth_mb_per_hour')!s:>10}{shmem.get('growth_mb_per_hour')!s:>12}")
    store = [(p["seconds"], p["objectStore"]["allocated"]) for p in samples if p.get("objectStore")]
    if len(store) >= 3:
        processes["object store (shared, counted once)"] = {"allocated": growth_of(store, samples[-1]["seconds"] / 2)}
        s = processes["object store (shared, counted once)"]["allocated"]
        capacity = samples[-1]["objectStore"]["capacity"]
        print(f"\nobject store, allocated pages counted once: {s['start_mb']} -> {s['end_mb']} MB of {capacity} MB, "
              f"{s['growth_mb_per_hour']} MB/h, second half {s['second_half_growth_mb_per_hour']} MB/h")
    print(f"\nprivate memory (anon), second half, within {FLAT_MB_PER_HOUR} MB/h: "
          + ", ".join(f"{key} {'yes' if flat else 'NO'}" for key, flat in flat_private(processes).items()))
    if args.plot and plot(samples, Path(args.plot), f"Ape-X soak: RSS by role ({args.workers} workers, "
                                                     f"{args.shards} shards, {args.env})"):
        print(f"plot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps({"run": run, "args": vars(args), **cpu_summary(), "summary": summary,
                                               "processes": processes, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
