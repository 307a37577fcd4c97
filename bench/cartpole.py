"""kuberl PPO vs RLlib 2.60 PPO on CartPole-v1: wall time and env steps to a return mean of 450.

    make bench-deps                      # RLlib 2.60 into .venv-rllib (never a kuberl dependency)
    .venv/bin/python -m bench.cartpole   # both, their ratios; --kuberl-only skips RLlib
    .venv/bin/python -m bench.cartpole --defaults-check   # PPO defaults on CartPole, Acrobot, Pendulum

kuberl runs in this process with its PPO defaults (workers=0, the fast path).
RLlib runs as a subprocess of .venv-rllib's python with its new API stack
defaults for PPO, on a local Ray bound to 127.0.0.2, capped at --rllib-timeout
seconds. Both clocks start at the first train() call (startup is reported
apart); both return means are over the last 100 episodes. The first line printed names the CPU, and --json
carries it (cpu_model, cpu_bf16: native bfloat16, cpu_flags).
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

# Returns that count as solved, for --defaults-check: PPO's default hyperparameters on each env.
SOLVED = {"CartPole-v1": 450.0, "Acrobot-v1": -100.0, "Pendulum-v1": -250.0}


def run_kuberl(target: float, seed: int, cap_seconds: float, workers: int, env: str = "CartPole-v1") -> dict[str, Any]:
    from kuberl.trainer.algorithms.ppo import PPOConfig

    started = time.perf_counter()
    algo = PPOConfig().environment(env).rollouts(workers=workers).debugging(seed=seed).build()
    startup = time.perf_counter() - started
    sample_seconds = 0.0
    t0 = time.perf_counter()
    try:
        while True:
            result = algo.train()
            sample_seconds += result["sampler"]["sampleSeconds"]
            elapsed = time.perf_counter() - t0
            mean = result["episodeReturnMean"]
            if (mean is not None and mean >= target and result["episodes"] >= 100) or elapsed > cap_seconds:
                break
    finally:
        algo.stop()
    return {
        "reached": mean is not None and mean >= target,
        "timeSeconds": elapsed,
        "timesteps": result["timesteps"],
        "episodeReturnMean": mean,
        "envStepsPerSecond": result["timesteps"] / elapsed,
        "samplingStepsPerSecond": result["timesteps"] / sample_seconds,
        "startupSeconds": startup,
    }


def kuberl_sampling_throughput(seconds: float, envs: int, fragment: int) -> float:
    """Env steps/s of a workers=0 rollout worker alone (PPO's numpy policy, no learning)."""
    from kuberl.trainer.algorithms.ppo import PPOConfig

    algo = PPOConfig().environment("CartPole-v1").rollouts(envs_per_worker=envs, fragment_length=fragment).build()
    try:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            steps += sum(batch.env_steps for batch in algo.sampler.sample())
        return steps / (time.perf_counter() - t0)
    finally:
        algo.stop()


def rllib_to_target(python: Path, target: float, seed: int, cap_seconds: float) -> dict[str, Any]:
    """RLlib's run as a subprocess (its defaults); its last progress line is kept if it has to be stopped."""
    return run_rllib(python, RLlibRun("PPO", seed=seed, target=target, cap=cap_seconds))


def defaults_check(seeds: str, cap_seconds: float) -> int:
    failures = 0
    for env, target in SOLVED.items():
        for seed in (int(s) for s in seeds.split(",")):
            run = run_kuberl(target, seed, cap_seconds, workers=0, env=env)
            failures += not run["reached"]
            print(f"{env} seed {seed}: {'solved' if run['reached'] else 'NOT solved'} ({target:g}) after "
                  f"{run['timesteps']} env steps, {run['timeSeconds']:.1f} s, return mean {run['episodeReturnMean']:.1f}",
                  flush=True)
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--seeds", default="1,2,3", help="kuberl seeds; the median run is compared")
    parser.add_argument("--workers", type=int, default=0, help="kuberl rollouts.workers")
    parser.add_argument("--kuberl-timeout", type=float, default=120.0)
    parser.add_argument("--kuberl-only", action="store_true")
    parser.add_argument("--rllib-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--rllib-timeout", type=float, default=300.0)
    parser.add_argument("--rllib-seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--defaults-check", action="store_true",
                        help="instead: kuberl PPO defaults on CartPole-v1, Acrobot-v1 and Pendulum-v1 to a solved return")
    args = parser.parse_args()
    print(cpu_caption(), flush=True)
    if args.defaults_check:
        return defaults_check(args.seeds, args.kuberl_timeout * 5)

    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        run = run_kuberl(args.target, seed, args.kuberl_timeout, args.workers)
        runs.append(run)
        print(f"kuberl seed {seed}: {'reached' if run['reached'] else 'NOT reached'} {args.target:g} in "
              f"{run['timeSeconds']:.1f} s, {run['timesteps']} env steps, {run['envStepsPerSecond']:.0f} steps/s "
              f"(sampling {run['samplingStepsPerSecond']:.0f}/s), startup {run['startupSeconds']:.1f} s", flush=True)
    median_time = statistics.median(r["timeSeconds"] if r["reached"] else float("inf") for r in runs)
    median_steps = statistics.median(r["timesteps"] if r["reached"] else float("inf") for r in runs)
    sampling = kuberl_sampling_throughput(5.0, envs=16, fragment=64)
    print(f"kuberl median: {median_time:.1f} s, {median_steps:.0f} env steps to {args.target:g}; "
          f"sampling alone {sampling:.0f} env steps/s", flush=True)
    report: dict[str, Any] = {"kuberl": {"runs": runs, "medianTimeSeconds": median_time,
                                         "medianTimesteps": median_steps, "samplingStepsPerSecond": sampling},
                              **cpu_summary()}
    if not args.kuberl_only:
        rllib = rllib_to_target(args.rllib_python, args.target, args.rllib_seed, args.rllib_timeout)
        report["rllib"] = rllib
        if "error" in rllib:
            print(f"RLlib: {rllib['error']}; last progress: {rllib.get('lastProgress')}", flush=True)
        else:
            print(f"RLlib: {'reached' if rllib['reached'] else 'NOT reached'} {args.target:g} in "
                  f"{rllib['timeSeconds']:.1f} s, {rllib['timesteps']} env steps, "
                  f"{rllib['envStepsPerSecond']:.0f} steps/s, startup {rllib['startupSeconds']:.1f} s", flush=True)
            time_ratio = median_time / rllib["timeSeconds"] if rllib["reached"] else None
            report["ratios"] = {
                "wallTimeKuberlOverRllib": time_ratio,
                "samplingKuberlOverRllib": sampling / rllib["envStepsPerSecond"],
                "trainingStepsPerSecondKuberlOverRllib":
                    statistics.median(r["envStepsPerSecond"] for r in runs) / rllib["envStepsPerSecond"],
            }
            print(f"wall time to {args.target:g}, kuberl / RLlib: {ratio(median_time, rllib['timeSeconds'])} "
                  f"(target <= 0.25)" if rllib["reached"] else "wall time ratio: n/a (RLlib did not reach it)")
            print(f"sampling env steps/s, kuberl / RLlib: {report['ratios']['samplingKuberlOverRllib']:.1f}x "
                  f"(target >= 10x); training steps/s: {report['ratios']['trainingStepsPerSecondKuberlOverRllib']:.1f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
