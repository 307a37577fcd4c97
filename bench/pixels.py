"""Quick figures for training from pixels on this machine, in one run.

    PYTHONPATH=src .venv/bin/python bench/pixels.py [--seconds 10] [--json out.json]

1. One preprocessed Pong env (`env.preprocessing: atari`) stepped with random actions on one core.
2. The Nature CNN's forward pass (uint8 [4, 84, 84] in, scaled on the CPU) at batch 8 and 64, one torch thread.
3. PPO on ALE/Pong-v5 with the Atari preset and the Nature CNN: env steps/s with 0 and 2 rollout workers
   (8 envs per worker, fragments of 64), over --seconds of training after one warm-up iteration.
The figures name the CPU: cpu_model, cpu_bf16 (native bfloat16), cpu_flags.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np
import torch

from kuberl.trainer.cpu import cpu_summary


def env_steps_per_second(seconds: float) -> float:
    from kuberl.trainer.sampling.envs import EnvSettings, make_env

    env = make_env(EnvSettings("ALE/Pong-v5", preprocessing="atari"))
    env.reset(seed=0)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    env.close()
    return steps / (time.perf_counter() - started)


def conv_obs_per_second(batch: int, seconds: float) -> float:
    import gymnasium as gym

    from kuberl.trainer.models.encoders import EncoderSpec, build_encoder

    torch.set_num_threads(1)
    encoder = build_encoder(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), EncoderSpec()).eval()
    frames = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        encoder(frames)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            encoder(frames)
            done += batch
    return done / (time.perf_counter() - started)


def ppo_env_steps_per_second(workers: int, seconds: float) -> dict[str, Any]:
    from kuberl.trainer.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("ALE/Pong-v5", preprocessing="atari")
              .rollouts(workers=workers, envs_per_worker=8, fragment_length=64)
              .training(minibatch_size=256, num_epochs=4).debugging(seed=1))
    config.document["spec"]["stop"] = {"timeSeconds": 3600}
    algo = config.build()
    try:
        first = algo.train()["timesteps"]  # warm-up: Ray actors, the first weights
        sample_seconds, started = 0.0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            result = algo.train()
            sample_seconds += result["sampler"]["sampleSeconds"]
        elapsed = time.perf_counter() - started
        steps = algo.timesteps - first
        return {"envStepsPerSecond": steps / elapsed, "sampleStepsPerSecond": steps / sample_seconds,
                "seconds": elapsed}
    finally:
        algo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("KUBERL_TORCH_THREADS", "1")
    figures: dict[str, Any] = {"loadAverage": os.getloadavg()[0], "cores": os.cpu_count(), **cpu_summary()}
    figures["pongEnvStepsPerSecond"] = env_steps_per_second(args.seconds)
    figures["natureCnnObsPerSecond"] = {b: conv_obs_per_second(b, args.seconds) for b in (8, 64)}
    figures["ppoPong"] = {w: ppo_env_steps_per_second(w, args.seconds * 3) for w in (0, 2)}
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1)


if __name__ == "__main__":
    main()
