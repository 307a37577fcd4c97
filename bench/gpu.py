"""kuberl on one GPU machine: Pong from pixels to a score of 18, and sampling throughput against env threads.

    PYTHONPATH=src:testing python bench/gpu.py pong --cap 480 --out OUT      # wall time to a 100-game mean of 18
    PYTHONPATH=src:testing python bench/gpu.py scaling --threads 1,2,4,8,14 --out OUT

bench/gpu_check.sh runs both (and the CUDA tests) on the device machine. Both train examples/pong-ppo-1gpu.yaml:
PPO with sampling in the learner's process, ALE's vector env stepping the games on C++ threads, the policy on
the GPU. No Ray: one process, so nothing here needs more than the GPU machine's own Python and a few wheels.

- `pong` trains until the 100-game mean of the game score reaches 18 (at least 100 games finished) or --cap
  seconds pass, and writes pong.json (every iteration: wall seconds since the build started, env steps,
  the 100-game mean, the learner's stats, the GPU's utilisation) and pong.png (the score against wall time
  and against env steps). Its last line is one JSON object: minutes_to_18 (null if not reached),
  env_steps_to_18, final_score, sticky_actions, and the machine (the GPU; the CPU: cpu_model, cpu_bf16: native
  bfloat16, cpu_flags).
- `scaling` runs --window seconds (after one warm-up iteration) for each thread count N, with 4 envs per
  thread and a batch of 8 minibatches, and prints env steps/s, learner updates/s, the GPU's mean
  utilisation, and where each iteration's time went (stepping the envs, the policy and copies, learning),
  the largest of which is what limits that point, under a line naming the CPU. It writes scaling.json (with the
  machine) and scaling.png.

On a machine without CUDA both print that nothing was measured and exit 2, unless --allow-cpu (a dry run
of the code paths, with figures that mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from score_curve import plot_score, scored_points, summary, train_to_score  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pong-ppo-1gpu.yaml"
GOAL = 18.0
ENVS_PER_THREAD = 4


class GpuMonitor:
    """nvidia-smi's utilisation and memory, sampled every 250 ms on a thread; `mean(since)` over a window."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []  # (monotonic time, utilisation %, MiB used)
        self.process: subprocess.Popen[str] | None = None
        if shutil.which("nvidia-smi") is None:
            return
        self.process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "250"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            try:
                util, memory = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.monotonic(), util, memory))

    def mean(self, since: float) -> dict[str, float | None]:
        window = [(u, m) for t, u, m in self.samples if t >= since]
        if not window:
            return {"gpuUtilization": None, "gpuMemoryMiB": None}
        return {"gpuUtilization": sum(u for u, _ in window) / len(window),
                "gpuMemoryMiB": max(m for _, m in window)}

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


def machine() -> dict[str, Any]:
    import torch

    from kuberl.trainer.cpu import cpu_summary

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"gpu": gpu, "cpuCores": os.cpu_count(), **cpu_summary(), "torch": torch.__version__,
            "python": platform.python_version()}


def config_for(overrides: list[str]) -> Any:
    from kuberl.trainer.algorithms.config import AlgorithmConfig

    return AlgorithmConfig.from_manifest(EXAMPLE, overrides)


def run_pong(args: argparse.Namespace) -> int:
    if args.from_scaling is not None:
        example = config_for(args.set).experiment.spec
        point = fastest_point(args.from_scaling, example.rollouts.envs_per_worker * example.rollouts.fragment_length)
        print(f"bench/gpu.py: the fastest scaling point with the example's batch: {json.dumps(point)}", flush=True)
        args.set = [*point_overrides(point), *args.set]
    monitor = GpuMonitor()
    config = config_for(args.set)
    sticky = config.document["spec"]["env"].get("config", {}).get("repeat_action_probability", 0.25)
    try:
        run = train_to_score(config, GOAL, args.cap, extra_row=monitor.mean)
    finally:
        monitor.stop()
    result = {**summary(run, GOAL), "sticky_actions": sticky, "cap_seconds": args.cap, "overrides": args.set,
              **machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pong.json").write_text(json.dumps({"summary": result, "curve": run.rows}, indent=0))
    plot_score({"kuberl PPO": scored_points(run.rows)}, GOAL,
               f"kuberl PPO, ALE/Pong-v5 (sticky actions {sticky}), {result['gpu']}, {result['cpuCores']} cores",
               args.out / "pong.png")
    print(json.dumps(result), flush=True)
    return 0


def point_settings(point: str) -> dict[str, int]:
    """A scaling point "THREADSxENVSxGROUPSxFRAGMENT" (or a bare thread count: 4 envs a thread, 1 group, 128)."""
    parts = [int(x) for x in point.split("x")]
    if len(parts) == 1:
        parts = [parts[0], ENVS_PER_THREAD * parts[0], 1, 128]
    if len(parts) != 4:
        raise SystemExit(f"bench/gpu.py: scaling point {point!r}: expected THREADSxENVSxGROUPSxFRAGMENT, or THREADS")
    return dict(zip(("threads", "envs", "groups", "fragment"), parts, strict=True))


def point_overrides(point: dict[str, int], minibatches: int = 8) -> list[str]:
    batch = point["envs"] * point["fragment"]
    return [f"rollouts.envThreads={point['threads']}", f"rollouts.envsPerWorker={point['envs']}",
            f"rollouts.envGroups={point['groups']}", f"rollouts.fragmentLength={point['fragment']}",
            f"config.minibatchSize={batch // minibatches}"]


def fastest_point(scaling: Path, batch: int) -> dict[str, int]:
    """The scaling run's fastest point (training env steps/s) among those with the example's batch, whose
    PPO settings (minibatches of batch/8, the example's 768) it keeps."""
    points = [p for p in json.loads(scaling.read_text())["points"] if p["batch"] == batch]
    if not points:
        raise SystemExit(f"bench/gpu.py: {scaling} has no point with a batch of {batch}")
    best = max(points, key=lambda p: p["envStepsPerSecond"])
    return {k: best[k] for k in ("threads", "envs", "groups", "fragment")}


def run_scaling(args: argparse.Namespace) -> int:
    monitor = GpuMonitor()
    points: list[dict[str, Any]] = []
    try:
        for settings in (point_settings(x) for x in args.threads.split(",")):
            config = config_for([*point_overrides(settings), *args.set])
            algo = config.build()
            envs = algo.spec.rollouts.envs_per_worker  # --set may have changed it
            batch = envs * algo.spec.rollouts.fragment_length
            try:
                result = algo.train()  # warm-up: CUDA kernels chosen, the envs past their resets
                first_steps = result["timesteps"]
                updates = sample = env = learn = 0.0
                since = t0 = time.monotonic()
                while time.monotonic() - t0 < args.window:
                    result = algo.train()
                    updates += result["learner"]["updates"]
                    sample += result["sampler"]["sampleSeconds"]
                    env += result["sampler"]["envSeconds"]
                    learn += result["learner"]["updateSeconds"]
                elapsed = time.monotonic() - t0
            finally:
                algo.stop()
            shares = {"envs": env / elapsed, "policy and copies": (sample - env) / elapsed,
                      "learning": learn / elapsed, "other (GAE values, weight sync)": 1 - (sample + learn) / elapsed}
            point = {**settings, "envs": envs, "batch": batch,
                     "envStepsPerSecond": (result["timesteps"] - first_steps) / elapsed,
                     "samplingStepsPerSecond": (result["timesteps"] - first_steps) / sample,
                     "updatesPerSecond": updates / elapsed, "updatesPerLearnerSecond": updates / learn if learn else None,
                     "timeShares": shares, "limitedBy": max(shares, key=shares.__getitem__), **monitor.mean(since)}
            points.append(point)
            print(json.dumps(point), flush=True)
    finally:
        monitor.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine(), "envsPerThread": ENVS_PER_THREAD, "windowSeconds": args.window, "points": points}
    (args.out / "scaling.json").write_text(json.dumps(report, indent=1))
    plot_scaling(points, report["machine"], args.out / "scaling.png")
    from kuberl.trainer.cpu import cpu_caption

    print(f"\n{report['machine']['gpu']}, {cpu_caption(report['machine'])}\n")
    print("| env threads | envs | groups | fragment | env steps/s | sampling alone | learner updates/s | GPU util % "
          "| limited by |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for p in points:
        util = "-" if p["gpuUtilization"] is None else f"{p['gpuUtilization']:.0f}"
        shares = ", ".join(f"{k} {v:.0%}" for k, v in p["timeShares"].items())
        print(f"| {p['threads']} | {p['envs']} | {p['groups']} | {p['fragment']} | {p['envStepsPerSecond']:,.0f} | "
              f"{p['samplingStepsPerSecond']:,.0f} | "
              f"{p['updatesPerSecond']:.1f} | {util} | {p['limitedBy']} ({shares}) |")
    return 0


def plot_scaling(points: list[dict[str, Any]], info: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    threads = [p["threads"] for p in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    if len(set(threads)) == len(threads):  # a curve against the threads
        x: list[Any] = threads
        ax.set_xlabel(f"env threads ({ENVS_PER_THREAD} envs each)"
                      if all(p["envs"] == ENVS_PER_THREAD * p["threads"] for p in points) else "env threads")
    else:  # settings at the same threads, side by side
        x = [f"{p['threads']}t {p['envs']}e\n{p['groups']}g f{p['fragment']}" for p in points]
        ax.set_xlabel("env threads (t), envs (e), env groups (g), fragment (f)")
    ax.plot(x, [p["envStepsPerSecond"] for p in points], marker="o", label="env steps/s (train)")
    ax.plot(x, [p["samplingStepsPerSecond"] for p in points], marker="s", label="env steps/s (sampling alone)")
    ax.set_ylabel("env steps/s")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"kuberl PPO on Pong: {info['gpu']}, {info['cpuCores']} cores", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("pong", "scaling"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-gpu-out")))
    parser.add_argument("--cap", type=float, default=480.0, help="pong: seconds before giving up")
    parser.add_argument("--threads", default="1,2,4,8,14",
                        help="scaling: the points, each an env thread count (4 envs a thread, 1 group, fragments of 128) "
                        "or THREADSxENVSxGROUPSxFRAGMENT")
    parser.add_argument("--from-scaling", type=Path, default=None,
                        help="pong: train with the threads, envs, groups and fragment of this scaling.json's fastest "
                        "point among those with the example's batch")
    parser.add_argument("--window", type=float, default=12.0, help="scaling: seconds measured per point")
    parser.add_argument("--set", action="append", default=[], help="a manifest override, as kuberl train --set")
    parser.add_argument("--allow-cpu", action="store_true", help="dry run without CUDA (the figures mean nothing)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        if not args.allow_cpu:
            print("bench/gpu.py: torch sees no CUDA GPU on this machine; nothing was measured.", flush=True)
            return 2
        args.set = ["learner.gpus=0", *args.set]
    return run_pong(args) if args.what == "pong" else run_scaling(args)


if __name__ == "__main__":
    sys.exit(main())
