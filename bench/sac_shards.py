"""SAC on two replay shards (Ape-X's topology) on Pendulum-v1: the greedy return after a fixed number of env
steps, per seed, with wall time and learner updates. A random policy scores about -1,200; solved is -150 to -250.

    .venv/bin/python -m bench.sac_shards                     # seed 7, 12,000 env steps
    .venv/bin/python -m bench.sac_shards --seeds 1,2,3 --timesteps 12000

2 rollout workers x 4 envs x 50 steps feed 2 prioritized shards of 10,000; the learner actor runs 64x64 nets,
batch 128, replay ratio 0.5 (64 samples per env step, at most 128), learningStarts 1,000; then 5 greedy
evaluation episodes. Every row names the CPU: cpu_model, cpu_bf16 (native bfloat16), cpu_flags.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from kuberl.trainer.algorithms.sac import SACConfig
from kuberl.trainer.cpu import cpu_summary


def run(seed: int, timesteps: int) -> dict:
    config = (SACConfig().environment("Pendulum-v1").rollouts(workers=2, envs_per_worker=4, fragment_length=50)
              .replay(shards=2, capacity=20_000)
              .training(hidden=[64, 64], learning_starts=1_000, replay_ratio=0.5, train_batch_size=128,
                        max_replay_ratio=128.0, min_iteration_seconds=0.5)
              .debugging(seed=seed))
    algo = config.build()
    started = time.monotonic()
    try:
        result = algo.train()
        while algo.timesteps < timesteps:
            result = algo.train()
        seconds = time.monotonic() - started
        evaluation = algo.evaluate(episodes=5)
    finally:
        algo.stop()
    return {"seed": seed, "timesteps": result["timesteps"], "updates": result["learner"]["updates"],
            "seconds": round(seconds, 1), "greedyReturnMean": round(evaluation["episodeReturnMean"], 1),
            "load": round(os.getloadavg()[0], 1), **cpu_summary()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="7", help="comma-separated seeds")
    parser.add_argument("--timesteps", type=int, default=12_000)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = [run(int(seed), args.timesteps) for seed in args.seeds.split(",")]
    for row in rows:
        print(json.dumps(row), flush=True)
    worst = min(rows, key=lambda r: r["greedyReturnMean"])
    print(f"worst seed {worst['seed']}: greedy return {worst['greedyReturnMean']} after {worst['timesteps']:,} "
          f"env steps, {worst['seconds']} s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
