"""kuberl against RLlib 2.60 on Atari Pong from pixels: env steps/s over the same window, in one run.

    make bench-deps                                   # RLlib 2.60 with ale-py into .venv-rllib
    PYTHONPATH=src .venv/bin/python bench/atari.py --seconds 90 [--json out.json]
    PYTHONPATH=src .venv/bin/python bench/atari.py --gpu   # a GPU machine: wall time to a score of 18

Every run is ALE/Pong-v5 with 2 rollout workers (RLlib: 2 env runners), each measured for --seconds
after its warm-up (Ray started, actors built, first weights out; Ape-X: past learningStarts), one
after another, so both sides see the same machine. An env step is one agent step (4 frames) on both.
Both sides play with the same sticky actions, --sticky (repeat_action_probability; default 0.25, ALE
v5's own, which overrides what the examples set), and every row says which.

- kuberl `apex-dqn`: `env.preprocessing: atari` (84x84x4 uint8), examples/pong-apex.yaml's config with
  2 workers x 16 envs x 50 steps, 2 replay shards of --apex-capacity, learningStarts 2,000; sampling
  runs free of the learner (replayRatio near 0, as in bench/apex_scaling.py), so env steps/s is what
  the actors sustain while the learner takes its share of the cores (learner updates/s beside it).
- kuberl `ppo`: examples/pong-ppo.yaml with 2 workers (8 envs x 128 steps, 4 epochs of 256), CPU learner.
- kuberl `appo`: examples/pong-appo.yaml (RLlib pong_appo.py's settings, the Nature CNN shared by the
  policy and value heads) with 2 workers x 16 envs x 32 steps, CPU learner; `appo-defaults`: APPO's
  defaults with the Atari preset (8 envs x 64 steps).
- RLlib APPO and PPO: RLlib's own Atari setup and settings from its examples (pong_appo.py, atari_ppo.py;
  see rllib_runner.py), 2 env runners, CPU learner.

Env steps/s counts whole training iterations (sampling and learning) on both sides. The first line printed names
the CPU, and --json carries it (cpu_model, cpu_bf16: native bfloat16, cpu_flags).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from rllib_runner import DEFAULT_PYTHON, RLlibRun, ratio, run_rllib  # noqa: E402

from kuberl.trainer.cpu import cpu_caption, cpu_summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = "ALE/Pong-v5"
WORKERS = 2

# RLlib's settings for Pong from its examples (rllib/examples/algorithms/appo/pong_appo.py, ppo/atari_ppo.py).
RLLIB_APPO = RLlibRun(
    "APPO", env=ENV, setup="atari", env_runners=WORKERS, envs_per_runner=2,
    training={"train_batch_size_per_learner": 500, "target_network_update_freq": 2, "lr": 0.0005,
              "vf_loss_coeff": 1.0, "entropy_coeff": [[0, 0.01], [3_000_000, 0.0]], "broadcast_interval": 5,
              "circular_buffer_num_batches": 4, "circular_buffer_iterations_per_batch": 2},
    learners={"num_aggregator_actors_per_learner": 2},
)
RLLIB_PPO = RLlibRun(
    "PPO", env=ENV, setup="atari", env_runners=WORKERS,
    training={"train_batch_size_per_learner": 4000, "minibatch_size": 128, "lambda_": 0.95, "kl_coeff": 0.5,
              "clip_param": 0.1, "vf_clip_param": 10.0, "entropy_coeff": 0.01, "num_epochs": 10, "lr": 0.00015,
              "grad_clip": 100.0, "grad_clip_by": "global_norm"},
)


STICKY = "env.config.repeat_action_probability"


def manifest_config(name: str, sticky: float, *overrides: str) -> Any:
    """examples/<name> as `kuberl train -f ... --set learner.gpus=0 --set rollouts.workers=2 --set ...` reads it,
    with `sticky` as its sticky actions."""
    from kuberl.trainer.algorithms.config import AlgorithmConfig

    return AlgorithmConfig.from_manifest(ROOT / "examples" / name,
                                         ["learner.gpus=0", f"rollouts.workers={WORKERS}", f"{STICKY}={sticky}",
                                          *overrides])


def apex_config(capacity: int, seed: int, sticky: float, envs_per_worker: int | None = None) -> Any:
    envs = [f"rollouts.envsPerWorker={envs_per_worker}"] if envs_per_worker else []
    return manifest_config("pong-apex.yaml", sticky, f"config.seed={seed}", "config.learningStarts=2000",
                           "config.replayRatio=0.000000001", "replay.shards=2", f"replay.capacity={capacity}", *envs)


def ppo_config(seed: int, sticky: float) -> Any:
    return manifest_config("pong-ppo.yaml", sticky, f"config.seed={seed}")


def appo_config(seed: int, sticky: float) -> Any:
    return manifest_config("pong-appo.yaml", sticky, f"config.seed={seed}")


def appo_defaults_config(seed: int, sticky: float) -> Any:
    from kuberl.trainer.algorithms.appo import APPOConfig

    return (APPOConfig().environment(ENV, env_config={"repeat_action_probability": sticky}, preprocessing="atari")
            .rollouts(workers=WORKERS).debugging(seed=seed))


def measure(config: Any, seconds: float, warm_steps: int = 0, updates_key: str | None = None) -> dict[str, Any]:
    """Env steps/s (and learner updates/s from the running count `learner.<updates_key>`) over `seconds` after
    the warm-up; for a synchronous algorithm also env steps/s while sampling alone (`sampler.sampleSeconds`)."""
    config.document["spec"]["stop"] = {"timeSeconds": 86_400, "timesteps": 10_000_000}  # PPO anneals over timesteps
    started = time.perf_counter()
    algo = config.build()
    try:
        result = algo.train()
        while result["timesteps"] < warm_steps:
            result = algo.train()
        startup = time.perf_counter() - started
        first_steps = result["timesteps"]
        first_updates = result["learner"][updates_key] if updates_key else 0
        load = os.getloadavg()[0]
        sample_seconds = 0.0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            result = algo.train()
            sample_seconds += result["sampler"].get("sampleSeconds", 0.0)
        elapsed = time.perf_counter() - t0
        steps = result["timesteps"] - first_steps
        return {
            "envStepsPerSecond": steps / elapsed,
            "samplingStepsPerSecond": steps / sample_seconds if sample_seconds else None,
            "updatesPerSecond": (result["learner"][updates_key] - first_updates) / elapsed if updates_key else None,
            "seconds": elapsed, "envSteps": result["timesteps"] - first_steps, "warmupSeconds": startup,
            "loadAverage": [load, os.getloadavg()[0]], "episodeReturnMean": result["episodeReturnMean"],
            "stickyActions": config.experiment.spec.env.config.get("repeat_action_probability"),
        }
    finally:
        algo.stop()


def rllib_window(python: Path, spec: RLlibRun, seconds: float, sticky: float) -> dict[str, Any]:
    spec.window = seconds
    spec.sticky = sticky
    load = os.getloadavg()[0]
    # An iteration of RLlib's Atari PPO (4,000 steps, 10 epochs) takes minutes on 2 busy cores.
    run = run_rllib(python, spec, deadline_seconds=3 * seconds + 900)
    run.pop("curve", None)
    return {**run, "loadAverage": [load, os.getloadavg()[0]], "stickyActions": spec.sticky}


def gpu_note() -> str:
    return ("--gpu: NOT RUN. This path needs a CUDA machine (learner.gpus: 1) and many CPU cores for the "
            "rollout workers; it trains kuberl apex-dqn and ppo from examples/pong-*.yaml and RLlib APPO to a "
            "score of 18 and reports wall time. No figure here comes from it.")


def run_gpu(args: argparse.Namespace) -> int:
    import torch

    from kuberl.trainer.algorithms.config import AlgorithmConfig

    if not torch.cuda.is_available():
        print(gpu_note(), flush=True)
        print("torch.cuda.is_available() is False on this machine: nothing was run.", flush=True)
        return 2
    report: dict[str, Any] = {**cpu_summary()}
    for name, path in (("kuberl apex-dqn", "pong-apex.yaml"), ("kuberl ppo", "pong-ppo.yaml")):
        config = AlgorithmConfig.from_manifest(ROOT / "examples" / path, [f"rollouts.workers={args.gpu_workers}",
                                                                          f"{STICKY}={args.sticky}"])
        config.stopping(episode_return_mean=18, time_seconds=int(args.gpu_cap))
        algo = config.build()
        t0 = time.perf_counter()
        try:
            while True:
                result = algo.train()
                mean, elapsed = result["episodeReturnMean"], time.perf_counter() - t0
                if (mean is not None and mean >= 18 and result["episodes"] >= 100) or elapsed > args.gpu_cap:
                    break
        finally:
            algo.stop()
        report[name] = {"reached": mean is not None and mean >= 18, "timeSeconds": elapsed,
                        "timesteps": result["timesteps"], "episodeReturnMean": mean, "stickyActions": args.sticky}
        print(f"{name}: {report[name]}", flush=True)
    theirs = RLlibRun(**{**RLLIB_APPO.__dict__, "env_runners": args.gpu_workers, "target": 18.0, "cap": args.gpu_cap,
                         "sticky": args.sticky})
    theirs.learners = {**theirs.learners, "num_gpus_per_learner": 1}
    report["RLlib APPO"] = run_rllib(args.rllib_python, theirs)
    report["RLlib APPO"].pop("curve", None)
    report["RLlib APPO"]["stickyActions"] = args.sticky
    print(f"RLlib APPO: {report['RLlib APPO']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=90.0, help="measuring window of each run, after warm-up")
    parser.add_argument("--apex-capacity", type=int, default=20_000, help="transitions per replay shard")
    parser.add_argument("--apex-envs", type=int, help="Ape-X envs per rollout worker (default: the example's)")
    parser.add_argument("--only", default="apex,ppo,appo,rllib-appo,rllib-ppo", help="runs to do, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sticky", type=float, default=0.25,
                        help="sticky actions (repeat_action_probability) on both sides; 0.25 is ALE v5's default")
    parser.add_argument("--rllib-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--gpu", action="store_true", help="instead: wall time to a score of 18 on a GPU machine")
    parser.add_argument("--gpu-workers", type=int, default=12, help="--gpu: rollout workers / env runners")
    parser.add_argument("--gpu-cap", type=float, default=6 * 3600.0, help="--gpu: seconds before giving up")
    args = parser.parse_args()
    if args.gpu:
        return run_gpu(args)
    os.environ.setdefault("KUBERL_TORCH_THREADS", "1")
    only = set(args.only.split(","))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()}, "
          f"{os.cpu_count()} cores, {cpu_caption()}; {args.seconds:g} s windows; sticky actions {args.sticky:g}; "
          f"{gpu_note()}",
          flush=True)
    seed, sticky = args.seed, args.sticky
    runs = {
        "kuberl apex-dqn": ("apex", lambda: measure(apex_config(args.apex_capacity, seed, sticky, args.apex_envs),
                                                    args.seconds, 4_000, "updates")),
        "kuberl ppo": ("ppo", lambda: measure(ppo_config(seed, sticky), args.seconds)),
        "kuberl appo": ("appo", lambda: measure(appo_config(seed, sticky), args.seconds, 0, "updatesTotal")),
        "kuberl appo, defaults": ("appo-defaults",
                                  lambda: measure(appo_defaults_config(seed, sticky), args.seconds, 0, "updatesTotal")),
        "RLlib APPO": ("rllib-appo", lambda: rllib_window(args.rllib_python, RLLIB_APPO, args.seconds, sticky)),
        "RLlib PPO": ("rllib-ppo", lambda: rllib_window(args.rllib_python, RLLIB_PPO, args.seconds, sticky)),
    }
    report: dict[str, Any] = {"seconds": args.seconds, "stickyActions": sticky,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **cpu_summary()}
    for name, (key, run) in runs.items():
        if key in only:
            for attempt in (1, 2):
                try:
                    report[name] = run()
                    break
                except Exception as exc:  # noqa: BLE001 - Ray's start times out on a very busy machine: once more
                    report[name] = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"{name}: attempt {attempt} failed: {report[name]['error'][:300]}", flush=True)
            print(f"{name}: {json.dumps(report[name])}", flush=True)
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    print(f"\n| run ({WORKERS} workers / env runners) | sticky actions | env steps/s | sampling alone | "
          "learner updates/s | load average (start, end) |")
    print("|---|---:|---:|---:|---:|---|")
    for name in runs:
        row = report.get(name)
        if row is None:
            continue
        if "error" in row:
            print(f"| {name} | {sticky:g} | error: {row['error'][:200]} | | | |")
            continue
        updates = row.get("updatesPerSecond")
        load = ", ".join(f"{x:.1f}" for x in row["loadAverage"])
        alone = row.get("samplingStepsPerSecond")
        print(f"| {name} | {row['stickyActions']:g} | {row['envStepsPerSecond']:,.1f} | "
              f"{'-' if alone is None else f'{alone:,.1f}'} | {'-' if updates is None else f'{updates:.2f}'} | {load} |")
    rllib_appo = report.get("RLlib APPO", {}).get("envStepsPerSecond")
    rllib_ppo = report.get("RLlib PPO", {}).get("envStepsPerSecond")
    for mine, theirs, name, goal in (("kuberl apex-dqn", rllib_appo, "Ape-X sampling / RLlib APPO", ">= 4"),
                                     ("kuberl appo", rllib_appo, "APPO / RLlib APPO", ">= 4"),
                                     ("kuberl ppo", rllib_ppo, "PPO / RLlib PPO", "")):
        ours = report.get(mine, {}).get("envStepsPerSecond")
        print(f"{name}: {ratio(ours, theirs)}{f' (goal {goal})' if goal else ''}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
