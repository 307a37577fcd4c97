"""kuberl SAC on HalfCheetah-v5 for N env steps, and with --rllib RLlib 2.60's SAC for as many, with as many
env runners (rollout workers) and envs each: the 100-episode return mean at the end, the wall time, and the
ratios kuberl / RLlib.

    .venv/bin/python -m bench.sac                                # kuberl, 300,000 env steps, 2 workers
    make bench-deps && .venv/bin/python -m bench.sac --rllib     # also RLlib SAC
    .venv/bin/python -m bench.sac --rllib --timesteps 5000       # a smoke run
    .venv/bin/python -m bench.sac --pendulum-seeds 1,2,3 --timesteps 0   # kuberl only: Pendulum-v1 to -250
    .venv/bin/python -m bench.sac --pendulum-seeds 1 --timesteps 0 --shards 2   # the same on 2 replay shards
    .venv/bin/python -m bench.sac --side-by-side --workers 0 --rllib-deadline 3600   # both at once, a core each

--side-by-side runs kuberl pinned to one core and RLlib pinned to the other at the same time (on this 2-core
machine 300k steps of either take about an hour or more, too long to run one after the other in a session).
When RLlib is stopped at its deadline short of --timesteps, both are compared at the env steps RLlib reached:
kuberl's wall time to those steps and its return mean there, from its per-iteration curve.

--pendulum-seeds runs the learning test's settings (tests/integration/test_sac.py: in-process, 64x64 nets,
replay ratio 0.25) to a 100-episode return mean of -250 and prints wall and CPU seconds per seed. --shards N
keeps SAC's replay in N replay shards fed by the rollout workers (Ape-X's topology; Pendulum: 2 workers x 4
envs, fragments of 50); CPU seconds are then the driver's only.

Both use one learner update of 256 transitions per env step (RLlib: training_intensity 256), 256x256 nets,
uniform replay of 1,000,000 and `--learning-starts` random steps; otherwise each its own SAC defaults. Both
clocks start at the first train() call (Ray's start and the build are reported apart); HalfCheetah's
episodes are 1,000 steps, so the return mean is over the last min(100, episodes) of them. The first line printed
names the CPU, and --json carries it (cpu_model, cpu_bf16: native bfloat16, cpu_flags).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from cartpole import ratio  # noqa: E402
from rllib_runner import run_script  # noqa: E402

from kuberl.trainer.cpu import cpu_caption, cpu_summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = "HalfCheetah-v5"
BATCH = 256

RLLIB_SCRIPT = r'''
import json, os, sys, time
env, timesteps, seed, runners, envs, starts, batch = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                      int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
                                                      int(sys.argv[7]))
started = time.perf_counter()
import ray
from ray.rllib.algorithms.sac import SACConfig
ray.init(address="local", _node_ip_address="127.0.0.2", include_dashboard=False, log_to_driver=False,
         num_cpus=max(4, os.cpu_count()))
config = (SACConfig().environment(env)
          .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs)
          .training(train_batch_size_per_learner=batch, training_intensity=batch,
                    num_steps_sampled_before_learning_starts=starts,
                    replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 1_000_000})
          .reporting(min_sample_timesteps_per_iteration=1000)
          .debugging(seed=seed))
algo = config.build_algo()
startup = time.perf_counter() - started
t0 = time.perf_counter()
steps, ret = 0, None
while steps < timesteps:
    result = algo.train()
    runners_ = result.get("env_runners", {})
    steps = int(result.get("num_env_steps_sampled_lifetime") or runners_.get("num_env_steps_sampled_lifetime") or steps)
    ret = runners_.get("episode_return_mean")
    ret = None if ret is None else float(ret)
    print(json.dumps({"progress": True, "timeSeconds": time.perf_counter() - t0, "timesteps": steps,
                      "episodeReturnMean": ret}), flush=True)
elapsed = time.perf_counter() - t0
print(json.dumps({"done": True, "timeSeconds": elapsed, "timesteps": steps, "episodeReturnMean": ret,
                  "startupSeconds": startup}), flush=True)
algo.stop()
ray.shutdown()
'''


def kuberl(timesteps: int, seed: int, workers: int, envs: int, learning_starts: int, shards: int = 0) -> dict[str, Any]:
    """kuberl SAC to `timesteps`; `curve` holds [seconds, env steps, return mean] after each iteration."""
    from kuberl.trainer.algorithms.sac import SACConfig

    started = time.perf_counter()
    algo = (SACConfig().environment(ENV).rollouts(workers=workers, envs_per_worker=envs)
            .replay(capacity=1_000_000, prioritized=False, shards=shards)
            .training(train_batch_size=BATCH, replay_ratio=1.0, hidden=[256, 256], learning_starts=learning_starts)
            .debugging(seed=seed).build())
    startup = time.perf_counter() - started
    t0 = time.perf_counter()
    curve: list[list[Any]] = []
    try:
        result = algo.train()
        curve.append([time.perf_counter() - t0, result["timesteps"], result["episodeReturnMean"]])
        while result["timesteps"] < timesteps:
            result = algo.train()
            curve.append([time.perf_counter() - t0, result["timesteps"], result["episodeReturnMean"]])
    finally:
        algo.stop()
    return {"timeSeconds": time.perf_counter() - t0, "timesteps": result["timesteps"],
            "episodes": result["episodes"], "episodeReturnMean": result["episodeReturnMean"],
            "updates": result["learner"]["updates"], "startupSeconds": startup, "curve": curve}


def at_steps(curve: list[list[Any]], steps: int) -> dict[str, Any] | None:
    """kuberl's first curve point at or past `steps` env steps: its seconds and return mean there."""
    for seconds, reached, mean in curve:
        if reached >= steps:
            return {"timeSeconds": seconds, "timesteps": reached, "episodeReturnMean": mean}
    return None


def side_by_side(args: argparse.Namespace) -> dict[str, Any]:
    """kuberl pinned to one core while RLlib runs pinned to another, both to --timesteps."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("--side-by-side needs two cores")
    os.sched_setaffinity(0, {cores[0]})  # this process (kuberl, workers: 0); RLlib's child is moved to cores[1]
    theirs: dict[str, Any] = {}

    def run_rllib() -> None:
        theirs.update(rllib(args.rllib_python, args.timesteps, args.seed, args.workers, args.envs_per_worker,
                            args.learning_starts, args.rllib_deadline, cpus={cores[1]}))

    thread = threading.Thread(target=run_rllib)
    thread.start()
    ours = kuberl(args.timesteps, args.seed, args.workers, args.envs_per_worker, args.learning_starts)
    print(_line(f"kuberl SAC (core {cores[0]})", ours), flush=True)
    thread.join()
    report: dict[str, Any] = {"kuberl": ours, "rllib": theirs, "cores": cores[:2]}
    if "error" not in theirs:
        print(_line(f"RLlib SAC (core {cores[1]})", theirs), flush=True)
        print(f"wall time, kuberl / RLlib: {ratio(ours['timeSeconds'], theirs['timeSeconds'])}; "
              f"return mean, kuberl / RLlib: {ratio(ours['episodeReturnMean'], theirs['episodeReturnMean'])}",
              flush=True)
        return report
    last = theirs.get("lastProgress")
    print(f"RLlib SAC (core {cores[1]}): {theirs['error']}", flush=True)
    if last and last.get("timesteps"):
        same = at_steps(ours["curve"], int(last["timesteps"]))
        report["atRLlibSteps"] = same
        print(f"RLlib SAC reached {last['timesteps']:,} env steps in {last['timeSeconds']:.1f} s, 100-episode return "
              f"mean {last['episodeReturnMean']}; kuberl at {same['timesteps']:,} env steps: "
              f"{same['timeSeconds']:.1f} s, return mean {same['episodeReturnMean']}; wall time to those steps, "
              f"kuberl / RLlib: {ratio(same['timeSeconds'], last['timeSeconds'])}" if same else
              f"RLlib SAC reached {last['timesteps']:,} env steps, beyond kuberl's run", flush=True)
    return report


def rllib(python: Path, timesteps: int, seed: int, workers: int, envs: int, learning_starts: int,
          deadline: float, cpus: set[int] | None = None) -> dict[str, Any]:
    if not python.exists():
        return {"error": f"{python} not found: run `make bench-deps` first"}
    args = [ENV, str(timesteps), str(seed), str(workers), str(envs), str(learning_starts), str(BATCH)]
    run = run_script(python, RLLIB_SCRIPT, args, deadline, cpus)
    final = [line for line in run.lines if line.get("done")]
    if final:
        return final[-1]
    return {"error": run.error("RLlib"), **({"lastProgress": run.lines[-1]} if run.lines else {})}


def pendulum_to_target(seed: int, target: float = -250.0, cap_seconds: float = 3600.0,
                       shards: int = 0) -> dict[str, Any]:
    from kuberl.trainer.algorithms.sac import SACConfig

    config = SACConfig().environment("Pendulum-v1").rollouts(workers=0)
    if shards:
        config = config.rollouts(workers=2, envs_per_worker=4, fragment_length=50).replay(shards=shards)
    algo = config.training(hidden=[64, 64], replay_ratio=0.25).debugging(seed=seed).build()
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        while True:
            result = algo.train()
            mean = result["episodeReturnMean"]
            if (mean is not None and mean >= target and result["episodes"] >= 100) \
                    or time.perf_counter() - t0 > cap_seconds:
                break
    finally:
        algo.stop()
    return {"seed": seed, "reached": mean is not None and mean >= target, "timeSeconds": time.perf_counter() - t0,
            "cpuSeconds": time.process_time() - cpu0, "timesteps": result["timesteps"], "episodeReturnMean": mean}


def _line(name: str, run: dict[str, Any]) -> str:
    mean = run["episodeReturnMean"]
    return (f"{name}: {run['timesteps']:,} env steps in {run['timeSeconds']:.1f} s "
            f"(startup {run['startupSeconds']:.1f} s), 100-episode return mean "
            f"{'n/a (no episode finished)' if mean is None else f'{mean:.1f}'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="rollout workers (RLlib: env runners)")
    parser.add_argument("--envs-per-worker", type=int, default=1)
    parser.add_argument("--learning-starts", type=int, default=5_000)
    parser.add_argument("--rllib", action="store_true", help="also run RLlib 2.60 SAC from .venv-rllib")
    parser.add_argument("--rllib-python", type=Path, default=ROOT / ".venv-rllib" / "bin" / "python")
    parser.add_argument("--rllib-deadline", type=float, default=24 * 3600.0, help="seconds before RLlib is stopped")
    parser.add_argument("--pendulum-seeds", default="", help="also: kuberl SAC on Pendulum-v1 to -250, these seeds")
    parser.add_argument("--shards", type=int, default=0, help="kuberl SAC's replay in this many replay shards")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--side-by-side", action="store_true",
                        help="kuberl and RLlib at the same time, each pinned to one core (see above)")
    args = parser.parse_args()

    print(cpu_caption(), flush=True)
    report: dict[str, Any] = {"env": ENV, "timesteps": args.timesteps, "workers": args.workers, "shards": args.shards,
                              **cpu_summary()}
    if args.side_by_side:
        report.update(side_by_side(args))
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        return 0
    pendulum = []
    for seed in (int(s) for s in args.pendulum_seeds.split(",") if s):
        run = pendulum_to_target(seed, shards=args.shards)
        pendulum.append(run)
        print(f"kuberl SAC Pendulum-v1 seed {seed}: {'reached' if run['reached'] else 'NOT reached'} -250 in "
              f"{run['timeSeconds']:.1f} s wall, {run['cpuSeconds']:.1f} s CPU, {run['timesteps']:,} env steps",
              flush=True)
    report["pendulum"] = pendulum
    if args.timesteps <= 0:
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        return 0 if all(r["reached"] for r in pendulum) else 1

    ours = kuberl(args.timesteps, args.seed, args.workers, args.envs_per_worker, args.learning_starts, args.shards)
    print(_line("kuberl SAC", ours), flush=True)
    report["kuberl"] = ours
    if args.rllib:
        theirs = rllib(args.rllib_python, args.timesteps, args.seed, args.workers, args.envs_per_worker,
                       args.learning_starts, args.rllib_deadline)
        report["rllib"] = theirs
        if "error" in theirs:
            print(f"RLlib SAC: {theirs['error']}", flush=True)
        else:
            print(_line("RLlib SAC", theirs), flush=True)
            print(f"wall time, kuberl / RLlib: {ratio(ours['timeSeconds'], theirs['timeSeconds'])}; "
                  f"return mean, kuberl / RLlib: {ratio(ours['episodeReturnMean'], theirs['episodeReturnMean'])}",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
