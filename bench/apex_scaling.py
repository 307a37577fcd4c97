"""Ape-X scaling on this machine, and RLlib 2.60's off-policy/async algorithms beside it, in one run.

    make bench-deps                                    # RLlib 2.60 into .venv-rllib (optional)
    .venv/bin/python bench/apex_scaling.py --plot docs/apex_scaling.png [--json out.json]

1. Throughput: env steps/s and learner updates/s of apex-dqn for rollout workers 1, 2, 4 and
   replay shards 1, 2, over --seconds each after a warm-up. Sampling does not wait for the learner
   here (replay_ratio near 0), so the figures show what the actors and the learner each sustain.
2. Wall time to --target (CartPole-v1 return mean over 100 episodes) with apex-dqn defaults,
   2 workers and 2 shards, capped at --cap seconds; --repeats runs (seeds --seed, --seed+1, ...),
   reported one by one and as the median (asynchronous training differs from run to run even
   with one seed).
3. RLlib 2.60 APPO and DQN (defaults) to the same target, as subprocesses of .venv-rllib's python
   on a local Ray bound to 127.0.0.2, each capped at --rllib-cap, --rllib-repeats runs each;
   skipped with a message when .venv-rllib is missing.
Prints a table under a line naming the CPU, and writes a PNG with the throughput bars and the learning curves;
--json's figures carry the CPU (cpu_model, cpu_bf16: native bfloat16, cpu_flags).
"""

from __future__ import annotations

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from rllib_runner import DEFAULT_PYTHON, RLlibRun, run_rllib  # noqa: E402

from kuberl.trainer.cpu import cpu_caption, cpu_summary  # noqa: E402


def apex_config(workers: int, shards: int, seed: int, **training: Any):
    from kuberl.trainer.algorithms.apex import ApexDQNConfig

    return (
        ApexDQNConfig().environment("CartPole-v1").rollouts(workers=workers, envs_per_worker=8, fragment_length=64)
        .replay(shards=shards, capacity=100_000).training(**training).debugging(seed=seed)
    )


def measure_throughput(workers: int, shards: int, seconds: float, warmup: float, seed: int) -> dict[str, Any]:
    """Steady-state env steps/s and updates/s with sampling free of the learner."""
    algo = apex_config(workers, shards, seed, replay_ratio=1e-9, learning_starts=2_000).build()
    try:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < warmup:
            algo.train()
        steps = updates = 0
        empty: list[float] = []
        t1 = time.perf_counter()
        while time.perf_counter() - t1 < seconds:
            result = algo.train()
            steps += sum(w["envSteps"] for w in result["workers"].values())
            learner = result["learner"]
            updates += round(learner["updatesPerSecond"] * result["iterationSeconds"])
            if learner["queueEmptyFraction"] is not None:
                empty.append(learner["queueEmptyFraction"])
        elapsed = time.perf_counter() - t1
    finally:
        algo.stop()
    return {
        "workers": workers, "shards": shards, "envStepsPerSecond": steps / elapsed,
        "updatesPerSecond": updates / elapsed,
        "samplesPerSecond": updates * 256 / elapsed,
        "queueEmptyFraction": sum(empty) / len(empty) if empty else None,
    }


def time_to_target(target: float, cap: float, seed: int) -> dict[str, Any]:
    """apex-dqn defaults, 2 workers and 2 shards, until the 100-episode return mean reaches `target`."""
    started = time.perf_counter()
    algo = apex_config(2, 2, seed).build()
    startup = time.perf_counter() - started
    curve: list[tuple[float, float | None]] = []
    empty: list[float] = []
    try:
        t0 = time.perf_counter()
        while True:
            result = algo.train()
            elapsed = time.perf_counter() - t0
            mean = result["episodeReturnMean"]
            curve.append((elapsed, mean))
            if result["learner"]["queueEmptyFraction"] is not None and result["learner"]["updates"] > 0:
                empty.append(result["learner"]["queueEmptyFraction"])
            if (mean is not None and mean >= target and result["episodes"] >= 100) or elapsed > cap:
                break
    finally:
        algo.stop()
    return {
        "reached": mean is not None and mean >= target, "timeSeconds": elapsed, "timesteps": result["timesteps"],
        "episodeReturnMean": mean, "envStepsPerSecond": result["timesteps"] / elapsed,
        "updates": result["learner"]["updates"], "startupSeconds": startup, "curve": curve,
        "queueEmptyFraction": sum(empty) / len(empty) if empty else None,
    }


def rllib_to_target(python: Path, algorithm: str, target: float, cap: float, seed: int) -> dict[str, Any]:
    return run_rllib(python, RLlibRun(algorithm, seed=seed, target=target, cap=cap))


def print_table(throughput: list[dict[str, Any]]) -> None:
    print(f"{'workers':>7} {'shards':>6} {'env steps/s':>12} {'updates/s':>10} {'samples/s':>10} {'queue empty':>12}")
    for row in throughput:
        empty = row["queueEmptyFraction"]
        print(f"{row['workers']:>7} {row['shards']:>6} {row['envStepsPerSecond']:>12.0f} {row['updatesPerSecond']:>10.1f} "
              f"{row['samplesPerSecond']:>10.0f} {'-' if empty is None else f'{empty:.1%}':>12}")


def describe(name: str, run: dict[str, Any], target: float) -> str:
    if "error" in run:
        return f"{name}: {run['error']}"
    state = "reached" if run["reached"] else "did NOT reach"
    mean = run["episodeReturnMean"]
    return (f"{name}: {state} {target:g} in {run['timeSeconds']:.1f} s, {run['timesteps']} env steps, "
            f"{run['envStepsPerSecond']:.0f} env steps/s (last return mean {'-' if mean is None else f'{mean:.1f}'})")


def plot(path: Path, throughput: list[dict[str, Any]], curves: dict[str, list], target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{r['workers']}w/{r['shards']}s" for r in throughput]
    xs = range(len(labels))
    left.bar([x - 0.2 for x in xs], [r["envStepsPerSecond"] for r in throughput], width=0.4, label="env steps/s")
    left.set_ylabel("env steps/s")
    twin = left.twinx()
    twin.bar([x + 0.2 for x in xs], [r["updatesPerSecond"] for r in throughput], width=0.4, color="tab:orange",
             label="learner updates/s")
    twin.set_ylabel("learner updates/s (batch 256)")
    twin.set_ylim(0, 1.3 * max(r["updatesPerSecond"] for r in throughput))
    left.set_ylim(0, 1.3 * max(r["envStepsPerSecond"] for r in throughput))
    left.set_xticks(list(xs), labels)
    left.set_xlabel("rollout workers / replay shards")
    left.set_title("apex-dqn throughput (CartPole-v1)")
    handles = left.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    twin.legend(handles, ["env steps/s", "learner updates/s"], loc="upper center", framealpha=0.95)  # above the bars
    for name, curve in curves.items():
        points = [(t, r) for t, r in curve if r is not None]
        if points:
            right.plot([t for t, _ in points], [r for _, r in points], label=name)
    right.axhline(target, color="grey", linestyle="--", linewidth=1)
    right.set_xlabel("wall time (s)")
    right.set_ylabel("episode return mean (100 episodes)")
    right.set_title("CartPole-v1: time to return")
    right.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median wall time to target (runs that missed it count as infinitely slow)."""
    ranked = sorted(runs, key=lambda r: r["timeSeconds"] if r.get("reached") else math.inf)
    return ranked[(len(ranked) - 1) // 2] if ranked else {"error": "no runs"}


def summary_line(name: str, runs: list[dict[str, Any]], target: float) -> str:
    if not runs or all("error" in r for r in runs):
        return describe(name, runs[0] if runs else {"error": "no runs"}, target)
    times = ", ".join(f"{r['timeSeconds']:.0f} s" if r.get("reached") else f"> {r['timeSeconds']:.0f} s (missed)"
                      for r in runs if "error" not in r)
    middle = median_run(runs)
    shown = f"{middle['timeSeconds']:.1f} s" if middle.get("reached") else "not reached"
    return f"{name}: median time to {target:g} over {len(runs)} runs: {shown}  (runs: {times})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, required=True, help="PNG to write")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per throughput point")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds before measuring each point")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--shards", default="1,2")
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--cap", type=float, default=300.0, help="apex-dqn time-to-target cap, seconds")
    parser.add_argument("--repeats", type=int, default=3, help="apex-dqn time-to-target runs")
    parser.add_argument("--rllib-cap", type=float, default=300.0, help="each RLlib run's cap, seconds")
    parser.add_argument("--rllib", default="APPO,DQN", help="RLlib algorithms to run; empty skips RLlib")
    parser.add_argument("--rllib-repeats", type=int, default=1, help="runs of each RLlib algorithm")
    parser.add_argument("--rllib-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from kuberl.trainer.distributed.ray_runtime import init_ray

    init_ray()
    throughput = []
    for workers in (int(w) for w in args.workers.split(",") if w):
        for shards in (int(s) for s in args.shards.split(",") if s):
            row = measure_throughput(workers, shards, args.seconds, args.warmup, args.seed)
            throughput.append(row)
            print(f"measured {workers} workers / {shards} shards: {row['envStepsPerSecond']:.0f} env steps/s, "
                  f"{row['updatesPerSecond']:.1f} updates/s", flush=True)
    apex_runs = []
    for i in range(args.repeats):
        apex_runs.append(time_to_target(args.target, args.cap, args.seed + i))
        print(describe(f"kuberl apex-dqn (2 workers, 2 shards), seed {args.seed + i}", apex_runs[-1], args.target),
              flush=True)
    import ray

    ray.shutdown()  # leave the CPUs to RLlib
    rllib: dict[str, list[dict[str, Any]]] = {}
    for name in (n for n in args.rllib.split(",") if n):
        for i in range(args.rllib_repeats):
            run = rllib_to_target(args.rllib_python, name, args.target, args.rllib_cap, args.seed + i)
            rllib.setdefault(name, []).append(run)
            print(describe(f"RLlib {name} (defaults), seed {args.seed + i}", run, args.target), flush=True)

    print()
    print(cpu_caption())
    print_table(throughput)
    print()
    apex = median_run(apex_runs)
    print(summary_line("kuberl apex-dqn (2 workers, 2 shards)", apex_runs, args.target))
    empty = [r["queueEmptyFraction"] for r in apex_runs if r.get("queueEmptyFraction") is not None]
    if empty:
        print(f"  learner queue found empty in {max(empty):.1%} of its fetches at most while training")
    for name, runs in rllib.items():
        print(summary_line(f"RLlib {name} (defaults)", runs, args.target))
    appo = median_run(rllib.get("APPO", []))
    if apex.get("reached") and appo.get("reached"):
        print(f"wall time to {args.target:g}, median apex-dqn / median RLlib APPO: "
              f"{apex['timeSeconds'] / appo['timeSeconds']:.2f} (target <= 0.5)")
    elif apex.get("reached") and "error" not in appo:
        print(f"wall time to {args.target:g}, median apex-dqn / RLlib APPO: below "
              f"{apex['timeSeconds'] / args.rllib_cap:.2f} (APPO's median run missed it within {args.rllib_cap:g} s)")
    curves = {"kuberl apex-dqn (median run)": apex.get("curve", []),
              **{f"RLlib {n}": median_run(r).get("curve", []) for n, r in rllib.items()}}
    plot(args.plot, throughput, curves, args.target)
    print(f"plot: {args.plot}")
    if args.json:
        args.json.write_text(json.dumps({"throughput": throughput, "apex": apex_runs, "rllib": rllib,
                                           **cpu_summary()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
