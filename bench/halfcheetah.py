"""PPO on MuJoCo HalfCheetah-v5: kuberl (examples/halfcheetah-ppo.yaml) and RLlib 2.60 PPO, return and wall time.

    make bench-deps                                       # RLlib 2.60 with mujoco into .venv-rllib
    PYTHONPATH=src .venv/bin/python bench/halfcheetah.py --estimate 60              # kuberl env steps/s, projected times
    PYTHONPATH=src .venv/bin/python bench/halfcheetah.py --timesteps 1000000 --seeds 1,2,3 --rllib-seeds 1

kuberl runs the example manifest as `kuberl train` reads it (stop.timesteps and config.seed overridden):
CleanRL's ppo_continuous_action settings (2,048 steps a batch, here 8 envs x 256, 10 epochs of
64-sample minibatches, lr 3e-4 annealed, GAE 0.95, clip 0.2, entropy 0, observations normalised),
in-process (`workers: 0`). RLlib runs the same hyperparameters on its new API stack with as many env
runners (0: sampling in the driver, 8 envs), a MeanStdFilter on observations and the same [64, 64] tanh
networks. The return is the mean of the last 100 episodes (1,000 steps each) at the end of the run.
Reference: CleanRL's published ppo_continuous_action on HalfCheetah-v4, 1M steps: 1,442 +- 46.
The first line printed names the CPU, and --json carries it (cpu_model, cpu_bf16: native bfloat16, cpu_flags).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from rllib_runner import DEFAULT_PYTHON, RLlibRun, run_rllib  # noqa: E402

from kuberl.trainer.cpu import cpu_caption, cpu_summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "examples" / "halfcheetah-ppo.yaml"
CLEANRL = (1442.0, 46.0)

# The example's hyperparameters in RLlib's names; its kl_coeff and vf_clip_param are switched off as in CleanRL.
RLLIB_TRAINING = {"train_batch_size_per_learner": 2048, "minibatch_size": 64, "num_epochs": 10, "lr": 3e-4,
                  "gamma": 0.99, "lambda_": 0.95, "clip_param": 0.2, "entropy_coeff": 0.0, "vf_loss_coeff": 0.5,
                  "use_kl_loss": False, "vf_clip_param": 1e9, "grad_clip": 0.5, "grad_clip_by": "global_norm"}


def kuberl_config(seed: int, timesteps: int) -> Any:
    from kuberl.trainer.algorithms.config import AlgorithmConfig

    return AlgorithmConfig.from_manifest(MANIFEST, [f"config.seed={seed}", f"stop.timesteps={timesteps}"])


def kuberl_run(seed: int, timesteps: int, seconds: float | None = None) -> dict[str, Any]:
    """Train to `timesteps` (or for `seconds`); the final 100-episode return mean and the wall time."""
    started = time.perf_counter()
    algo = kuberl_config(seed, timesteps).build()
    startup = time.perf_counter() - started
    load = os.getloadavg()[0]
    curve: list[tuple[int, float | None]] = []
    t0 = time.perf_counter()
    try:
        while True:
            result = algo.train()
            curve.append((result["timesteps"], result["episodeReturnMean"]))
            elapsed = time.perf_counter() - t0
            if result["timesteps"] >= timesteps or (seconds is not None and elapsed >= seconds):
                break
    finally:
        algo.stop()
    return {"seed": seed, "timesteps": result["timesteps"], "timeSeconds": elapsed, "startupSeconds": startup,
            "envStepsPerSecond": result["timesteps"] / elapsed, "episodeReturnMean": result["episodeReturnMean"],
            "episodes": result["episodes"], "loadAverage": [load, os.getloadavg()[0]], "curve": curve[:: max(1, len(curve) // 50)]}


def rllib_run(python: Path, seed: int, timesteps: int, cap: float) -> dict[str, Any]:
    spec = RLlibRun("PPO", env="HalfCheetah-v5", setup="mujoco", seed=seed, env_runners=0, envs_per_runner=8,
                    training=RLLIB_TRAINING, timesteps=timesteps, cap=cap,
                    env_runner_options={"rollout_fragment_length": 256},
                    model={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False})
    load = os.getloadavg()[0]
    run = run_rllib(python, spec, deadline_seconds=cap + 600)
    curve = run.pop("curve", [])
    return {**run, "seed": seed, "loadAverage": [load, os.getloadavg()[0]], "curve": curve[:: max(1, len(curve) // 50)]}


def describe(name: str, run: dict[str, Any]) -> str:
    if "error" in run:
        return f"{name}: {run['error']} (last: {run.get('lastProgress')})"
    mean = run["episodeReturnMean"]
    load = ", ".join(f"{x:.1f}" for x in run["loadAverage"])
    return (f"{name} seed {run['seed']}: {run['timesteps']:,} env steps in {run['timeSeconds']:.0f} s "
            f"({run['envStepsPerSecond']:.0f}/s), return mean (100 episodes) "
            f"{'-' if mean is None else f'{mean:,.1f}'}, load {load}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=1_000_000)
    parser.add_argument("--seeds", default="1,2,3", help="kuberl seeds; empty: none")
    parser.add_argument("--rllib-seeds", default="1", help="RLlib seeds; empty: none")
    parser.add_argument("--rllib-cap", type=float, default=3600.0, help="seconds before RLlib's run is stopped")
    parser.add_argument("--rllib-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--estimate", type=float, help="instead: kuberl for this many seconds, and projected times")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("KUBERL_TORCH_THREADS", "1")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}, {cpu_caption()}",
          flush=True)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.estimate:
        run = kuberl_run(1, args.timesteps, seconds=args.estimate)
        print(describe("kuberl ppo (estimate)", run))
        per_seed = args.timesteps / run["envStepsPerSecond"]
        print(f"projected: {per_seed / 60:.1f} min a seed to {args.timesteps:,} steps, "
              f"{per_seed * len(seeds) / 60:.1f} min for {len(seeds)} seeds (at this load)")
        return 0

    report: dict[str, Any] = {"timesteps": args.timesteps, "kuberl": [], "rllib": [], **cpu_summary()}
    for seed in seeds:
        report["kuberl"].append(kuberl_run(seed, args.timesteps))
        print(describe("kuberl ppo", report["kuberl"][-1]), flush=True)
    for seed in (int(s) for s in args.rllib_seeds.split(",") if s):
        report["rllib"].append(rllib_run(args.rllib_python, seed, args.timesteps, args.rllib_cap))
        print(describe("RLlib PPO", report["rllib"][-1]), flush=True)

    print("\n| run | seed | env steps | wall time | return mean (last 100 episodes) | load average (start, end) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, runs in (("kuberl ppo", report["kuberl"]), ("RLlib 2.60 PPO", report["rllib"])):
        for run in runs:
            if "error" in run:
                print(f"| {name} | {run['seed']} | error: {run['error'][:150]} | | | |")
                continue
            mean = run["episodeReturnMean"]
            load = ", ".join(f"{x:.1f}" for x in run["loadAverage"])
            print(f"| {name} | {run['seed']} | {run['timesteps']:,} | {run['timeSeconds']:.0f} s | "
                  f"{'-' if mean is None else f'{mean:,.1f}'} | {load} |")
    returns = [r["episodeReturnMean"] for r in report["kuberl"] if r["episodeReturnMean"] is not None]
    if returns:
        spread = statistics.stdev(returns) if len(returns) > 1 else 0.0
        print(f"kuberl: mean {statistics.fmean(returns):,.1f} +- {spread:,.1f} over {len(returns)} seeds, "
              f"worst seed {min(returns):,.1f}; CleanRL (HalfCheetah-v4, 1M steps): {CLEANRL[0]:,.0f} +- {CLEANRL[1]:.0f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
