"""Would CleanRL's reward normalization close PPO's continuous-control defaults rows? A probe, not a feature.

CleanRL's ppo_continuous_action.py, the source of the continuous-control set, also scales rewards: a running std
of each env's discounted return (Gymnasium's NormalizeReward, gamma 0.99), then clips them to +-10. kuberl's PPO
has no such setting yet, so this probe puts it in the env: `Probe` wraps the MuJoCo env in those two wrappers
and appends each episode's raw return to a file, since the returns kuberl reports are then the scaled ones.
The run is a defaults row's (`bench.defaults.train`: a manifest with only algorithm, env, seed and steps); the figure is the mean raw
return of the last 100 episodes, as the defaults rows' `episodeReturnMean`.

    .venv/bin/python -m bench.reward_norm_probe --env Hopper-v5 --seed 2      # about 6 min idle, 1M steps
    .venv/bin/python -m bench.reward_norm_probe --env Walker2d-v5 --seed 4 --timesteps 200000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from bench.defaults import Row, train

from kuberl.trainer.cpu import cpu_summary

REWARD_CLIP = 10.0


class _RawReturns(gym.Wrapper):
    """Appends each episode's raw return to `log`, below the wrappers that scale the reward."""

    def __init__(self, env: gym.Env, log: str):
        super().__init__(env)
        self._log, self._return = log, 0.0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        if terminated or truncated:
            with open(self._log, "a") as out:
                out.write(f"{self._return}\n")
        return obs, reward, terminated, truncated, info


class Probe(gym.Wrapper):
    """`base` with CleanRL's reward normalization and clip; the env a probe manifest names."""

    def __init__(self, base: str = "Hopper-v5", log: str = os.devnull, gamma: float = 0.99):
        env = gym.wrappers.NormalizeReward(_RawReturns(gym.make(base), log), gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -REWARD_CLIP, REWARD_CLIP)))
        super().__init__(env)


def last_mean(returns: list[float], window: int = 100) -> float:
    tail = returns[-window:]
    return sum(tail) / len(tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timesteps", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    row = Row(f"reward-norm-{args.env.split('-')[0].lower()}", "ppo", "bench.reward_norm_probe:Probe",
              args.timesteps, None, "probe")
    with tempfile.TemporaryDirectory(prefix="kuberl-reward-norm-") as tmp:
        log = Path(tmp) / "returns.txt"
        run = train(row, args.seed, args.timesteps, Path(tmp), env_config={"base": args.env, "log": str(log)})
        if not run["ok"]:
            print(run["error"], file=sys.stderr)
            return 1
        returns = [float(line) for line in log.read_text().split()]
    best = max([last_mean(returns[:end]) for end in range(100, len(returns), 50)] + [last_mean(returns)])
    result = {"env": args.env, "seed": args.seed, "timesteps": run["timesteps"], "episodes": len(returns),
              "lastHundredMean": last_mean(returns), "best": best, "wallSeconds": run["wallSeconds"], **cpu_summary()}
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
