"""Time to a return mean of 450 on CartPole-v1 over several seeds: PPO, DQN and Ape-X, median and worst.

    .venv/bin/python bench/seeds.py --json seeds.json              # seeds 1-5, all three, 300 s cap
    .venv/bin/python bench/seeds.py --busy --algorithms apex-dqn   # with a CPU burner on every core

Each run is its own subprocess (a fresh Ray for Ape-X) with the algorithm's defaults; Ape-X runs
with 2 rollout workers and 2 replay shards (8 envs x 64 steps each, capacity 100k, as in
bench/apex_scaling.py). The clock starts at the first train(); a run counts as reached once the
mean return of the last 100 episodes is >= --target, and as missed at --cap seconds. `--busy`
starts one busy-looping process per core once a run is built and stops them (by PID) when it
ends: learning must not depend on how much CPU the learner happens to get. Load averages are recorded
beside every run. Prints a markdown table; --json writes the runs with their per-iteration
curves (return, and for the Q-learners loss, mean Q and the measured replay ratio). The first line and
the last (the summaries) name the CPU; --json carries it (cpu_model, cpu_bf16: native bfloat16, cpu_flags).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kuberl.trainer.cpu import cpu_caption, cpu_summary

ALGORITHMS = ("apex-dqn", "dqn", "ppo")


def build(algorithm: str, seed: int, training: dict[str, Any]) -> Any:
    """The algorithm's defaults on CartPole-v1, with `training` overriding hyperparameters."""
    if algorithm == "ppo":
        from kuberl.trainer.algorithms.ppo import PPOConfig

        return PPOConfig().environment("CartPole-v1").training(**training).debugging(seed=seed).build()
    if algorithm == "dqn":
        from kuberl.trainer.algorithms.dqn import DQNConfig

        return DQNConfig().environment("CartPole-v1").training(**training).debugging(seed=seed).build()
    if algorithm == "apex-dqn":
        from kuberl.trainer.algorithms.apex import ApexDQNConfig

        return (
            ApexDQNConfig().environment("CartPole-v1").rollouts(workers=2, envs_per_worker=8, fragment_length=64)
            .replay(shards=2, capacity=100_000).training(**training).debugging(seed=seed).build()
        )
    raise ValueError(f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")


def curve_point(result: dict[str, Any], elapsed: float) -> dict[str, Any]:
    point = {"t": round(elapsed, 2), "timesteps": result["timesteps"], "return": result["episodeReturnMean"]}
    learner = result.get("learner")
    if isinstance(learner, dict):
        for key in ("updates", "loss", "meanQ", "replayRatio", "targetSyncs"):
            if key in learner:
                point[key] = learner[key]
    return point


def run_one(algorithm: str, seed: int, target: float, cap: float, training: dict[str, Any],
            busy: bool = False) -> dict[str, Any]:
    """One run in this process, until the 100-episode return mean reaches `target` or `cap` seconds pass."""
    started = time.perf_counter()
    algo = build(algorithm, seed, training)
    startup = time.perf_counter() - started
    curve: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    burners = start_burners() if busy else []  # from the first train(): Ray's start-up times out on busy cores
    try:
        t0 = time.perf_counter()
        while True:
            result = algo.train()
            elapsed = time.perf_counter() - t0
            curve.append(curve_point(result, elapsed))
            mean = result["episodeReturnMean"]
            if (mean is not None and mean >= target and result["episodes"] >= 100) or elapsed > cap:
                break
    finally:
        stop_burners(burners)
        algo.stop()
    return {
        "algorithm": algorithm, "seed": seed, "reached": mean is not None and mean >= target,
        "timeSeconds": elapsed, "timesteps": result["timesteps"], "episodeReturnMean": mean,
        "startupSeconds": startup, "loadBefore": load_before, "loadAfter": os.getloadavg(), "curve": curve,
    }


def run_in_subprocess(algorithm: str, seed: int, target: float, cap: float, training: str,
                      busy: bool) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--one", algorithm, "--seeds", str(seed),
               "--target", str(target), "--cap", str(cap), "--training", training, *(["--busy"] if busy else [])]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=cap + 300)
    except subprocess.TimeoutExpired:
        return {"algorithm": algorithm, "seed": seed, "error": "no result within cap + 300 s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"algorithm": algorithm, "seed": seed, "error": f"exit {done.returncode}: {done.stderr[-1500:]}"}
    return json.loads(lines[-1])


# Spins until its parent is gone, so that no burner outlives a run that was killed.
BURNER = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"


def start_burners() -> list[subprocess.Popen]:
    """One busy loop per core, as child processes of this one."""
    return [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(os.cpu_count() or 1)]


def stop_burners(burners: list[subprocess.Popen]) -> None:
    for burner in burners:
        burner.terminate()
    for burner in burners:
        try:
            burner.wait(timeout=10)
        except subprocess.TimeoutExpired:
            burner.kill()
            burner.wait()


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst time to target; a missed run (or an error) counts as infinitely slow."""
    times = [r["timeSeconds"] if r.get("reached") else float("inf") for r in runs]
    median, worst = (statistics.median(times), max(times)) if times else (None, None)
    return {"runs": len(runs), "reached": sum(1 for r in runs if r.get("reached")),  # null: missed, in JSON
            "medianSeconds": median if median != float("inf") else None,
            "worstSeconds": worst if worst != float("inf") else None,
            "missed": any(not r.get("reached") for r in runs)}


def seconds(value: float | None) -> str:
    return "missed" if value is None else f"{value:.1f} s"


def markdown(runs: list[dict[str, Any]], summaries: dict[str, dict[str, Any]], target: float, cap: float) -> str:
    rows = [f"| algorithm | seed | reached {target:g} | wall time | env steps | load before -> after |",
            "|---|---:|---|---:|---:|---|"]
    for r in runs:
        if "error" in r:
            rows.append(f"| {r['algorithm']} | {r['seed']} | error | | | |")
            continue
        time_cell = f"{r['timeSeconds']:.1f} s" if r["reached"] else f"> {cap:g} s (last mean {r['episodeReturnMean']:.0f})"
        load = f"{r['loadBefore'][0]:.1f} -> {r['loadAfter'][0]:.1f}"
        rows.append(f"| {r['algorithm']} | {r['seed']} | {'yes' if r['reached'] else 'no'} | {time_cell} | "
                    f"{r['timesteps']:,} | {load} |")
    rows += ["", "| algorithm | reached | median | worst |", "|---|---|---:|---:|"]
    for name, s in summaries.items():
        rows.append(f"| {name} | {s['reached']} of {s['runs']} | {seconds(s['medianSeconds'])} | "
                    f"{seconds(s['worstSeconds'])} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="run in this order")
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--cap", type=float, default=300.0, help="seconds of training per run before it counts as missed")
    parser.add_argument("--busy", action="store_true", help="a CPU burner process per core while each run trains")
    parser.add_argument("--json", type=Path, help="also write runs, curves and summaries here")
    parser.add_argument("--training", default="{}",
                        help='hyperparameters over the defaults, as JSON (a sweep of one algorithm): \'{"lr": 5e-4}\'')
    parser.add_argument("--one", metavar="ALGORITHM", help=argparse.SUPPRESS)  # a single run, as a subprocess
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.one:
        run = run_one(args.one, seeds[0], args.target, args.cap, json.loads(args.training), args.busy)
        print(json.dumps(run), flush=True)
        return 0

    algorithms = [a for a in args.algorithms.split(",") if a]
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"started {started}, load average {os.getloadavg()}, busy={args.busy}, training={args.training}, "
          f"{cpu_caption()}", flush=True)
    runs: list[dict[str, Any]] = []
    for algorithm in algorithms:
        for seed in seeds:
            run = run_in_subprocess(algorithm, seed, args.target, args.cap, args.training, args.busy)
            runs.append(run)
            if args.json:  # as it goes, so that a stopped bench keeps its runs
                args.json.write_text(json.dumps(report(runs, algorithms, started, args), indent=1))
            if "error" in run:
                print(f"{algorithm} seed {seed}: {run['error']}", flush=True)
            else:
                print(f"{algorithm} seed {seed}: {'reached' if run['reached'] else 'MISSED'} {args.target:g} in "
                      f"{run['timeSeconds']:.1f} s, {run['timesteps']} env steps (last mean "
                      f"{run['episodeReturnMean']}), load {run['loadBefore'][0]:.1f} -> {run['loadAfter'][0]:.1f}",
                      flush=True)
    figures = report(runs, algorithms, started, args)
    print()
    print(markdown(runs, figures["summaries"], args.target, args.cap))
    print(json.dumps({"summaries": figures["summaries"], **cpu_summary()}))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


def report(runs: list[dict[str, Any]], algorithms: list[str], started: str, args: argparse.Namespace) -> dict[str, Any]:
    summaries = {a: summarize([r for r in runs if r["algorithm"] == a]) for a in algorithms}
    return {"started": started, "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "busy": args.busy,
            "cpus": os.cpu_count(), **cpu_summary(), "training": json.loads(args.training), "target": args.target,
            "cap": args.cap, "runs": runs, "summaries": summaries}


if __name__ == "__main__":
    sys.exit(main())
