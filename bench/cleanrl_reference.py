"""A reference measured here: CleanRL's own `ppo_continuous_action.py`, run on this machine on the seeds kuberl's
defaults matrix runs, so that a row's worst seed meets the reference's worst seed rather than its published mean.

CleanRL's current scripts are not on PyPI (its package there is 0.4.8, from 2021), so the script is given by path:
`git show fe8d8a0:cleanrl/ppo_continuous_action.py` in github.com/vwxyzjn/cleanrl (the commit measured here). It runs
unchanged, from its own venv with the versions its pyproject pins (gymnasium 0.29.1, mujoco 2.3.3), never from
kuberl's:

    make bench-deps-cleanrl                 # .venv-cleanrl
    .venv/bin/python -m bench.cleanrl_reference --script ppo_continuous_action.py --env Hopper-v4 --seeds 1,2 \\
        --json cleanrl-hopper-12.json
    .venv/bin/python -m bench.defaults --rows ppo-hopper-v4 --seeds 1,2 --json kuberl-hopper-12.json
    .venv/bin/python -m bench.defaults --merge cleanrl-hopper-12.json kuberl-hopper-12.json --plot hopper.png

Compare like with like: the script runs the -v4 MuJoCo envs its pyproject pins, so kuberl's side of the
comparison is the defaults matrix's `-v4` row (`ppo-hopper-v4`), not its `-v5` one.

The return is what bench/defaults.py reports for kuberl: the mean of the last 100 episodes' returns at the end of
the budget (from the script's `episodic_return` lines, which are raw: its reward normalization sits inside them).
The --json rows have bench/defaults.py's shape, so its --merge, --reuse and --plot read them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.defaults import ROWS, return_curve, row_result, table

from kuberl.trainer.cpu import cpu_caption

ROOT = Path(__file__).resolve().parents[1]
EPISODE_LINE = re.compile(r"global_step=(\d+), episodic_return=\[?([-0-9.e+]+)\]?")
WINDOW = 100
REFERENCE_ROWS = {"Hopper-v4": "ppo-hopper", "HalfCheetah-v4": "ppo-halfcheetah", "Walker2d-v4": "ppo-walker2d"}


def episode_returns(stdout: str) -> list[tuple[int, float]]:
    """(global step, episode return) for every episode the script printed, in order."""
    return [(int(m.group(1)), float(m.group(2))) for m in EPISODE_LINE.finditer(stdout)]


def running_means(episodes: list[tuple[int, float]], window: int = WINDOW) -> list[dict[str, float]]:
    """After each episode, the mean of the last `window` returns: the lines bench/defaults.py's curve reads."""
    recent: deque[float] = deque(maxlen=window)
    lines = []
    for step, ret in episodes:
        recent.append(ret)
        lines.append({"timesteps": step, "episodeReturnMean": sum(recent) / len(recent)})
    return lines


def run_seed(python: Path, script: Path, env_id: str, seed: int, timesteps: int, work: Path) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    started = time.perf_counter()
    proc = subprocess.run([str(python), str(script), "--env-id", env_id, "--seed", str(seed), "--total-timesteps",
                           str(timesteps), "--no-cuda"], capture_output=True, text=True, env=env, cwd=work)
    wall = time.perf_counter() - started
    lines = running_means(episode_returns(proc.stdout))
    if proc.returncode != 0 or not lines:
        return {"seed": seed, "ok": False, "wallSeconds": round(wall, 1), "error": (proc.stderr or proc.stdout)[-2000:]}
    curve = return_curve(lines)
    return {"seed": seed, "ok": True, "return": lines[-1]["episodeReturnMean"], "timesteps": timesteps,
            "best": max(r for _, r in curve), "wallSeconds": round(wall, 1), "episodes": len(lines), "curve": curve}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", type=Path, required=True, help="CleanRL's ppo_continuous_action.py")
    parser.add_argument("--python", type=Path, default=ROOT / ".venv-cleanrl" / "bin" / "python")
    parser.add_argument("--env", default="Hopper-v4", choices=sorted(REFERENCE_ROWS))
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--timesteps", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not args.script.is_file():
        parser.error(f"--script: no file at {args.script}")
    if not args.python.is_file():
        parser.error(f"--python: no interpreter at {args.python} (make bench-deps-cleanrl makes it)")
    row = next(r for r in ROWS if r.name == REFERENCE_ROWS[args.env])
    seeds = [int(s) for s in args.seeds.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="kuberl-cleanrl-") as tmp:
        runs = [run_seed(args.python, args.script.resolve(), args.env, seed, args.timesteps, Path(tmp))
                for seed in seeds]
    here = replace(row, name=f"cleanrl-{row.name}", env=args.env, env_note="",
                   source=f"CleanRL's script run here; the reference is {row.source}")
    result = row_result(here, args.timesteps, runs)
    print(cpu_caption(result))
    print(table([result]))
    if args.json:
        args.json.write_text(json.dumps([result], indent=2))
    return 0 if all(run["ok"] for run in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
