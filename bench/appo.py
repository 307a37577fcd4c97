"""kuberl APPO on CartPole-v1: wall time to a 100-episode return mean of 450, a scaling table over rollout
workers, and with --rllib the same figures of RLlib 2.60's APPO with as many env runners.

    .venv/bin/python -m bench.appo                          # seeds 1..3 to 450, scaling over 1, 2, 4 workers
    .venv/bin/python -m bench.appo --seeds 1,2,3,4,5 --workers 2 --scaling 1,2,4 --scaling-seconds 30
    make bench-deps && .venv/bin/python -m bench.appo --rllib   # also RLlib APPO, and kuberl / RLlib ratios

Both clocks start at the first train() call (Ray's start and the build are reported apart); both return
means are over the last 100 episodes. kuberl runs with its APPO defaults, RLlib with its own (new API
stack), each on a local Ray bound to 127.0.0.2. The scaling rows run each setting for --scaling-seconds
after one warm-up iteration: env steps/s sampled, learner updates/s, and the policy lag of the batches
learned from (learner version - behaviour version, in learner updates). Every figure names the CPU (printed first;
in --json cpu_model, cpu_bf16: native bfloat16, cpu_flags).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from rllib_runner import DEFAULT_PYTHON, RLlibRun, ratio, run_rllib  # noqa: E402

from kuberl.trainer.cpu import cpu_caption, cpu_summary  # noqa: E402


def _build(workers: int, seed: int) -> Any:
    from kuberl.trainer.algorithms.appo import APPOConfig

    return APPOConfig().environment("CartPole-v1").rollouts(workers=workers).debugging(seed=seed).build()


def kuberl_to_target(target: float, seed: int, workers: int, cap_seconds: float) -> dict[str, Any]:
    started = time.perf_counter()
    algo = _build(workers, seed)
    startup = time.perf_counter() - started
    t0 = time.perf_counter()
    try:
        while True:
            result = algo.train()
            elapsed = time.perf_counter() - t0
            mean = result["episodeReturnMean"]
            if (mean is not None and mean >= target and result["episodes"] >= 100) or elapsed > cap_seconds:
                break
    finally:
        algo.stop()
    return {"seed": seed, "reached": mean is not None and mean >= target, "timeSeconds": elapsed,
            "timesteps": result["timesteps"], "episodeReturnMean": mean, "startupSeconds": startup}


def kuberl_scaling(workers: int, seconds: float) -> dict[str, Any]:
    algo = _build(workers, seed=1)
    try:
        algo.train()  # warm-up: Ray actors started, first weights out
        first_steps, first_updates = algo.timesteps, algo.updates
        lags: list[float] = []
        lag_max = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            learner = algo.train()["learner"]
            lags.append(learner["policyLagUpdatesMean"])
            lag_max = max(lag_max, learner["policyLagUpdatesMax"])
        elapsed = time.perf_counter() - t0
        return {"workers": workers, "envStepsPerSecond": (algo.timesteps - first_steps) / elapsed,
                "updatesPerSecond": (algo.updates - first_updates) / elapsed,
                "policyLagMean": statistics.fmean(lags), "policyLagMax": lag_max}
    finally:
        algo.stop()


def rllib(python: Path, mode: str, target: float, cap: float, seed: int, runners: int) -> dict[str, Any]:
    window = cap if mode == "scaling" else None
    return run_rllib(python, RLlibRun("APPO", seed=seed, env_runners=runners, target=target, cap=cap, window=window))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--seeds", default="1,2,3", help="kuberl seeds to the target (empty: none); the median is compared")
    parser.add_argument("--workers", type=int, default=2, help="rollout workers (RLlib: env runners) to the target")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds before a run counts as not reaching it")
    parser.add_argument("--scaling", default="1,2,4", help="worker counts of the scaling table; empty skips it")
    parser.add_argument("--scaling-seconds", type=float, default=20.0)
    parser.add_argument("--rllib", action="store_true", help="also run RLlib 2.60 APPO from .venv-rllib")
    parser.add_argument("--rllib-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--rllib-seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    print(cpu_caption(), flush=True)
    report: dict[str, Any] = {"target": args.target, "workers": args.workers, **cpu_summary()}
    runs = []
    for seed in (int(s) for s in args.seeds.split(",") if s):
        run = kuberl_to_target(args.target, seed, args.workers, args.cap)
        runs.append(run)
        print(f"kuberl APPO seed {seed}: {'reached' if run['reached'] else 'NOT reached'} {args.target:g} in "
              f"{run['timeSeconds']:.1f} s, {run['timesteps']} env steps (startup {run['startupSeconds']:.1f} s)",
              flush=True)
    report["kuberl"] = runs
    reached = [r["timeSeconds"] for r in runs if r["reached"]]
    median_time = statistics.median(reached) if len(reached) == len(runs) and runs else None
    if runs:
        print(f"kuberl APPO: {len(reached)}/{len(runs)} seeds reached {args.target:g}; median wall time "
              f"{median_time if median_time is None else round(median_time, 1)} s, max "
              f"{max(reached) if reached else float('nan'):.1f} s", flush=True)

    if args.rllib:
        theirs = rllib(args.rllib_python, "target", args.target, args.cap, args.rllib_seed, args.workers)
        report["rllib"] = theirs
        if "error" in theirs:
            print(f"RLlib APPO: {theirs['error']}", flush=True)
        else:
            print(f"RLlib APPO: {'reached' if theirs['reached'] else 'NOT reached'} {args.target:g} in "
                  f"{theirs['timeSeconds']:.1f} s, {theirs['timesteps']} env steps "
                  f"(startup {theirs['startupSeconds']:.1f} s)", flush=True)
            if theirs["reached"]:
                print(f"wall time to {args.target:g}, kuberl / RLlib: {ratio(median_time, theirs['timeSeconds'])} "
                      "(goal <= 0.25)", flush=True)

    rows = []
    for workers in (int(w) for w in args.scaling.split(",") if w):
        row = kuberl_scaling(workers, args.scaling_seconds)
        if args.rllib:
            theirs = rllib(args.rllib_python, "scaling", args.target, args.scaling_seconds, 1, workers)
            row["rllibEnvStepsPerSecond"] = theirs.get("envStepsPerSecond")
        rows.append(row)
    if rows:
        print("\n| rollout workers | env steps/s | learner updates/s | policy lag mean / max (updates) |"
              + (" RLlib APPO env steps/s | kuberl / RLlib |" if args.rllib else ""))
        print("| ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if args.rllib else ""))
        for row in rows:
            line = (f"| {row['workers']} | {row['envStepsPerSecond']:,.0f} | {row['updatesPerSecond']:.1f} | "
                    f"{row['policyLagMean']:.1f} / {row['policyLagMax']} |")
            if args.rllib:
                theirs = row.get("rllibEnvStepsPerSecond")
                line += f" {theirs:,.0f} | {ratio(row['envStepsPerSecond'], theirs)} |" if theirs else " n/a | n/a |"
            print(line, flush=True)
    report["scaling"] = rows
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if len(reached) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
