"""The peers bench/pong.py runs beside kuberl on Pong from pixels (`--peer`), each its own program in its own venv.

- `cleanrl`: CleanRL's own cleanrl/ppo_atari.py at commit CLEANRL_COMMIT, unchanged (PongNoFrameskip-v4: no
  sticky actions, frame skip 4 with the max of the last two frames, up to 30 no-ops, episodic life, FIRE reset,
  clipped rewards, 84x84 grey, 4 frames stacked; 8 envs x 128 steps, 4 epochs of 4 minibatches, lr 2.5e-4
  annealed over 10M steps). `cleanrl-envpool`: its ppo_atari_envpool.py, the same algorithm on EnvPool's Pong-v5
  (EnvPool's own preprocessing, sticky actions 0 by EnvPool's default). Both from .venv-cleanrl with the versions
  CleanRL's pyproject pins for Atari where they install for Python 3.11 (gymnasium 0.29.1, ale-py 0.8.1,
  shimmy, gym 0.23.1 for the EnvPool script), EnvPool 0.8.4 (CleanRL pins <0.7, which has no Python 3.11 wheel)
  and the torch kuberl pins. The scripts are not on PyPI: `make bench-deps-pong-peers` writes them, with
  cleanrl_utils/, into .bench-peers/cleanrl/ (git-ignored).
- `rllib-ppo`: RLlib 2.60 PPO from .venv-rllib with kuberl's image PPO values in RLlib's names (RLLIB_PPO_KUBERL),
  on ALE/Pong-v5 with sticky actions 0.0 and RLlib's Atari wrappers at 84x84 (frame skip 4 with the max, up to
  30 no-ops, episodic life, FIRE reset), 4 frames stacked by its connectors, rewards clipped, the Nature CNN.
- `sample-factory`: Sample Factory 2.1.1's sf_examples.atari.train_atari on atari_pong (PongNoFrameskip-v4, its
  CleanRL-like wrappers) with its own Atari defaults (atari_params.py: 8 workers, rollout 128, batch 256, 4
  epochs, lr 2.5e-4 decayed, clip 0.1), on the CPU, from .venv-sf.

ale-py 0.8.1 ships no game ROMs; CleanRL's pyproject gets them from AutoROM's accept-rom-license package, which
downloads them when it builds. The make target takes Pong's ROM from the ale-py 0.12.1 wheel instead (the same file:
md5 60e0ea3c...e5ec, which ale-py 0.8.1 checks) into .bench-peers/roms, and every peer run is given
ALE_PY_ROM_DIR=.bench-peers/roms.

Every peer is run as a subprocess in its own session, its stdout read line by line as it comes: the clock starts
when it is launched (imports and builds included, as kuberl's includes its build), and it is stopped (its whole
process group) at the first of: a 100-game mean >= the goal with at least 100 games seen, the cap in seconds, the
env-step cap (smoke runs), SIGINT or SIGTERM to the bench (the run is kept, marked "interrupted"). An env step
is one agent step (4 frames) for every peer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from score_curve import stop_requests  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT / ".bench-peers"
ROM_DIR = PEERS_DIR / "roms"
CLEANRL_DIR = PEERS_DIR / "cleanrl"
CLEANRL_COMMIT = "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"
CLEANRL_PYTHON = ROOT / ".venv-cleanrl" / "bin" / "python"
RLLIB_PYTHON = ROOT / ".venv-rllib" / "bin" / "python"
SF_PYTHON = ROOT / ".venv-sf" / "bin" / "python"
PEERS = ("cleanrl", "cleanrl-envpool", "rllib-ppo", "sample-factory")
WINDOW = 100
FRAME_SKIP = 4
CURVE_POINTS_EVERY = 30.0  # seconds between the curve points a run keeps (and its last)
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL to a peer's process group

# kuberl's PPO values for images (kuberl.api.defaults, "cleanrl-ppo-atari", with PPOParams' gamma, GAE lambda and
# value clip) as examples/pong-ppo-cpu.yaml sets them (8 envs x 128 steps on 2 cores, minibatches of 64, the rate
# annealed over stop.timesteps: 2M) in RLlib 2.60's names; tests/unit/test_bench_pong_peers.py holds them equal.
# kuberl has no KL penalty (use_kl_loss off) and normalizes the advantages.
# Its sampling in 2 env runners of 4 envs each keeps the batch (8 x 128) and steps the games on both cores.
RLLIB_PPO_KUBERL: dict[str, Any] = {
    "training": {"lr": [[0, 2.5e-4], [2_000_000, 0.0]], "gamma": 0.99, "lambda_": 0.95, "clip_param": 0.1,
                 "vf_clip_param": 10.0, "vf_loss_coeff": 0.5, "entropy_coeff": 0.01, "num_epochs": 4,
                 "minibatch_size": 64, "train_batch_size_per_learner": 1024, "grad_clip": 0.5,
                 "grad_clip_by": "global_norm", "use_kl_loss": False, "kl_coeff": 0.0},
    "env_runners": {"num_env_runners": 2, "num_envs_per_env_runner": 4, "rollout_fragment_length": 128},
    # The Nature CNN with valid padding (84 -> 20 -> 9 -> 7); RLlib's CNN encoder ends at the flattened conv
    # output, so each head (policy, value) has its own 512 layer where kuberl's encoder shares one.
    "model": {"conv_filters": [[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]],
              "conv_activation": "relu", "head_fcnet_hiddens": [512], "head_fcnet_activation": "relu",
              "vf_share_layers": True},
}

RLLIB_PPO_SCRIPT = r'''
import json, os, sys, time
spec = json.loads(sys.argv[1])
import gymnasium as gym
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
from ray.tune.registry import register_env

def make_atari(cfg):
    import ale_py  # in each env runner's process
    gym.register_envs(ale_py)
    return wrap_atari_for_new_api_stack(gym.make("ALE/Pong-v5", **cfg), dim=84, framestack=None)

# A Ray of its own ("local": never someone else's cluster on this machine).
ray.init(address="local", _node_ip_address="127.0.0.2", include_dashboard=False, log_to_driver=False,
         num_cpus=max(4, os.cpu_count()))
register_env("atari", make_atari)

# Every game's return, not RLlib's episode_return_mean (a mean over recent iterations' episodes only); summed step
# by step, as the episode on_episode_end gets is its last chunk only.
returns = {}

def on_episode_step(*, episode, **kwargs):
    returns[episode.id_] = returns.get(episode.id_, 0.0) + float(episode.get_rewards(-1))

def on_episode_end(*, episode, metrics_logger, **kwargs):
    metrics_logger.log_value("game_returns", returns.pop(episode.id_, 0.0), reduce=None, clear_on_reduce=True)

config = (PPOConfig().debugging(seed=spec["seed"]).callbacks(on_episode_step=on_episode_step,
                                                             on_episode_end=on_episode_end)
          .environment("atari", env_config={"frameskip": 1, "full_action_space": False,
                                            "repeat_action_probability": spec["sticky"]}, clip_rewards=True)
          .env_runners(env_to_module_connector=lambda env, spaces=None, device=None: FrameStackingEnvToModule(
              num_frames=4), **spec["env_runners"])
          .training(learner_connector=lambda obs_space, act_space: FrameStackingLearner(num_frames=4),
                    **spec["training"])
          .rl_module(model_config=DefaultModelConfig(**spec["model"])))
algo = config.build_algo()
while True:
    result = algo.train()
    runners = result.get("env_runners", {})
    games = runners.get("game_returns") or []
    print(json.dumps({"timesteps": int(result.get("num_env_steps_sampled_lifetime")
                                       or runners.get("num_env_steps_sampled_lifetime") or 0),
                      "games": [float(g) for g in (games if isinstance(games, list) else [games])],
                      "episodes_lifetime": runners.get("num_episodes_lifetime")}), flush=True)
'''

CLEANRL_EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?([-0-9.e+]+)\]?")
SF_FRAMES = re.compile(r"Total num frames: (\d+)")
SF_REWARD = re.compile(r"Avg episode reward: \[\(0, '([-0-9.e+]+)'\)\]")


class GameWindow:
    """CleanRL's lines: one per finished game; the point after each is the mean of the last WINDOW games."""

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=WINDOW)
        self.games = 0

    def __call__(self, line: str) -> tuple[int, float, int] | None:
        match = CLEANRL_EPISODE.search(line)
        if not match:
            return None
        self.recent.append(float(match.group(2)))
        self.games += 1
        return int(match.group(1)), sum(self.recent) / len(self.recent), self.games


class SampleFactoryReport:
    """Sample Factory's status lines: `Total num frames` (frames: 4 per env step), then `Avg episode reward`, its
    mean over the last stats_avg (100) games; it prints no count of games, so games stays None."""

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self, line: str) -> tuple[int, float, None] | None:
        if frames := SF_FRAMES.search(line):
            self.steps = int(frames.group(1)) // FRAME_SKIP
        if reward := SF_REWARD.search(line):
            return self.steps, float(reward.group(1)), None
        return None


class RLlibGames(GameWindow):
    """The RLlib script's lines: one per iteration, with the env steps and the returns of the games it finished."""

    peer_count: int | None = None

    def __call__(self, line: str) -> tuple[int, float, int] | None:
        if not line.startswith("{"):
            return None
        row = json.loads(line)
        self.recent.extend(row["games"])
        self.games += len(row["games"])
        self.peer_count = row.get("episodes_lifetime")  # RLlib's own count, against which games is checked
        return (row["timesteps"], sum(self.recent) / len(self.recent), self.games) if self.recent else None


@dataclass
class PeerCommand:
    argv: list[str]
    env: dict[str, str]
    parse: Callable[[str], tuple[int, float, int | None] | None]
    version: str
    sticky: float
    missing: list[str] = field(default_factory=list)  # why it cannot run here; empty: it can


def python_version_of(python: Path, package: str) -> str | None:
    if not python.exists():
        return None
    proc = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def peer_command(peer: str, seed: int, sticky: float, workdir: Path) -> PeerCommand:
    """The command that trains `peer` on `seed`, or one whose `missing` says what is not installed."""
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1", "ALE_PY_ROM_DIR": str(ROM_DIR)}
    rom = [] if (ROM_DIR / "pong.bin").is_file() else [f"{ROM_DIR / 'pong.bin'} missing"]
    if peer in ("cleanrl", "cleanrl-envpool"):
        script = CLEANRL_DIR / "cleanrl" / ("ppo_atari.py" if peer == "cleanrl" else "ppo_atari_envpool.py")
        env_id = "PongNoFrameskip-v4" if peer == "cleanrl" else "Pong-v5"
        package = "ale-py" if peer == "cleanrl" else "envpool"
        version = python_version_of(CLEANRL_PYTHON, package)
        missing = [f"{path} missing" for path in (CLEANRL_PYTHON, script) if not path.exists()]
        missing += [] if version or missing else [f"{package} not installed in {CLEANRL_PYTHON}"]
        return PeerCommand([str(CLEANRL_PYTHON), str(script), "--env-id", env_id, "--seed", str(seed), "--no-cuda"],
                           {**base_env, "PYTHONPATH": str(CLEANRL_DIR)}, GameWindow(),
                           f"CleanRL {CLEANRL_COMMIT[:7]} {script.name}, {package} {version}",
                           0.0, (rom if peer == "cleanrl" else []) + missing)
    if peer == "rllib-ppo":
        version = python_version_of(RLLIB_PYTHON, "ray")
        script = workdir / "rllib_ppo.py"
        script.write_text(RLLIB_PPO_SCRIPT)
        spec = {"seed": seed, "sticky": sticky, **RLLIB_PPO_KUBERL}
        return PeerCommand([str(RLLIB_PYTHON), str(script), json.dumps(spec)], base_env, RLlibGames(),
                           f"RLlib {version} PPO", sticky, [] if version else [f"ray not installed in {RLLIB_PYTHON}"])
    if peer == "sample-factory":
        version = python_version_of(SF_PYTHON, "sample-factory")
        return PeerCommand([str(SF_PYTHON), "-m", "sf_examples.atari.train_atari", "--env=atari_pong",
                            f"--experiment=pong-seed{seed}", f"--train_dir={workdir / 'sf'}", f"--seed={seed}",
                            "--device=cpu", "--with_wandb=False"], base_env, SampleFactoryReport(),
                           f"Sample Factory {version} APPO", 0.0,
                           rom + ([] if version else [f"sample-factory not installed in {SF_PYTHON}"]))
    raise ValueError(f"--peer: {peer!r} is not one of {', '.join(PEERS)}")


def thin(points: Sequence[tuple[float, int | None, float, int | None]],
         every: float = CURVE_POINTS_EVERY) -> list[list[Any]]:
    """[minutes, env steps, 100-game mean] at most one per `every` seconds, and the last point."""
    kept: list[list[Any]] = []
    last = -every
    for i, (seconds, steps, score, _) in enumerate(points):
        if seconds - last >= every or i == len(points) - 1:
            kept.append([round(seconds / 60, 2), steps, round(score, 2)])
            last = seconds
    return kept


def stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to the peer's process group (it runs in its own session), SIGKILL if it is still there."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_peer(peer: str, seed: int, goal: float, cap: float, max_steps: int | None,
             sticky: float = 0.0, stop: threading.Event | None = None) -> dict[str, Any]:
    """Train `peer` on `seed` until a 100-game mean >= `goal` (100 games at least where the peer counts them),
    `cap` seconds, `max_steps` env steps or a signal (which also sets `stop`, the caller's event that ends a
    series of runs); the summary (as bench/pong.py's for kuberl) and the full curve."""
    with tempfile.TemporaryDirectory(prefix=f"kuberl-pong-{peer}-") as tmp:
        command = peer_command(peer, seed, sticky, Path(tmp))
        head = {"system": peer, "peer": peer, "peer_version": command.version, "seed": seed,
                "sticky_actions": command.sticky, "cap_seconds": cap, "max_env_steps": max_steps}
        if command.missing:
            return {"summary": {**head, "error": "; ".join(command.missing) + " (make bench-deps-pong-peers)"},
                    "points": []}
        points: list[tuple[float, int, float, int | None]] = []
        reached: tuple[float, int, float, int | None] | None = None
        stopped = "exit"
        tail: deque[str] = deque(maxlen=40)
        started = time.monotonic()
        proc = subprocess.Popen(command.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=command.env, cwd=tmp, start_new_session=True)
        capped = threading.Event()

        def at_cap() -> None:
            capped.set()
            stop_group(proc)

        def interrupt() -> None:  # in the signal handler: no waiting there, the loop below ends as the pipe closes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)

        timer = threading.Timer(cap, at_cap)
        timer.start()
        with stop_requests(stop, on_stop=interrupt) as interrupted, contextlib.ExitStack() as cleanup:
            cleanup.callback(stop_group, proc)
            cleanup.callback(timer.cancel)
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip())
                point = command.parse(line)
                if point is None:
                    continue
                points.append((time.monotonic() - started, *point))
                steps, score, games = point
                if score >= goal and (games is None or games >= WINDOW):
                    reached, stopped = points[-1], "goal"
                    break
                if max_steps is not None and steps >= max_steps:
                    stopped = "steps"
                    break
        wall = time.monotonic() - started
    if stopped == "exit":
        stopped = "interrupted" if interrupted.is_set() else "cap" if capped.is_set() else stopped
    last = points[-1] if points else None
    summary = {
        **head, f"minutes_to_{goal:g}": None if reached is None else round(reached[0] / 60, 2),
        f"env_steps_to_{goal:g}": None if reached is None else reached[1],
        "final_score": None if last is None else round(last[2], 2), "final_timesteps": None if last is None else last[1],
        "games": None if last is None else last[3], "games_by_peer": getattr(command.parse, "peer_count", None),
        "wall_seconds": round(wall, 1), "stopped": stopped,
        "env_steps_per_second": None if last is None else round(last[1] / last[0], 1),
        "curve": thin(points),
    }
    if stopped == "exit":
        summary["returncode"] = proc.returncode
        summary["output_tail"] = "\n".join(tail)[-3000:]
    return {"summary": summary, "points": points}
