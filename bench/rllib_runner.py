"""RLlib 2.60 runs for the benches: one script, run with .venv-rllib's python as a subprocess that cannot
outlive its deadline.

`run_rllib(python, RLlibRun(...))` trains one RLlib algorithm and returns its figures; every bench that
compares with RLlib goes through it, so the result fields and the stop rules are the same everywhere.
The script prints JSON lines on stdout; they come back parsed. It runs in its own session, so the
watchdog stops RLlib's Ray processes with it, and nothing else on the machine. Its figures come back with the
CPU they ran on (cpu_model, cpu_bf16: native bfloat16, cpu_flags), read on this side: .venv-rllib has no kuberl.

Setups (`RLlibRun.setup`):
- "plain": `config.environment(env)` with the algorithm's defaults.
- "atari": RLlib's own Atari setup, as in its examples (rllib/examples/algorithms/{ppo/atari_ppo,
  appo/pong_appo}.py): `wrap_atari_for_new_api_stack` (64x64 grey, frame skip 4, noop reset, episodic
  life, fire reset), frames stacked by the FrameStacking connectors, clipped rewards, their conv stack;
  sticky actions `RLlibRun.sticky` (ALE v5's default 0.25 unless set: their examples use 0.0), so that a
  bench gives both sides the same.
- "mujoco": a MeanStdFilter connector on the observations, as in RLlib's mujoco_ppo.py example.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kuberl.trainer.cpu import cpu_summary

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PYTHON = ROOT / ".venv-rllib" / "bin" / "python"


@dataclass
class ScriptRun:
    lines: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    stopped: bool = False  # killed by the watchdog at the deadline
    stderr: str = ""

    def error(self, what: str) -> str:
        return f"{what} stopped at the deadline" if self.stopped else f"{what} exited {self.returncode}: {self.stderr}"


def run_script(python: Path, script: str, args: list[str], deadline_seconds: float,
               cpus: set[int] | None = None) -> ScriptRun:
    """Run `script` with `python`; `cpus` pins it (and every process it starts) to those cores."""
    with tempfile.NamedTemporaryFile("w", suffix="_rllib.py", delete=False) as file:
        file.write(script)
    run = ScriptRun()
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    try:
        with tempfile.TemporaryFile("w+") as stderr_file:
            proc = subprocess.Popen([str(python), file.name, *args], stdout=subprocess.PIPE, stderr=stderr_file,
                                    text=True, cwd=tempfile.gettempdir(), start_new_session=True, preexec_fn=pin)
            watchdog = threading.Timer(deadline_seconds, lambda: os.killpg(proc.pid, signal.SIGKILL))
            watchdog.start()
            try:
                assert proc.stdout is not None
                run.lines = [json.loads(line) for line in proc.stdout if line.startswith("{")]
                run.returncode = proc.wait()
            finally:
                run.stopped = not watchdog.is_alive()
                watchdog.cancel()
            stderr_file.seek(0)
            run.stderr = stderr_file.read()[-2000:].strip()
    finally:
        Path(file.name).unlink(missing_ok=True)
    return run


@dataclass
class RLlibRun:
    """One RLlib training run. It stops at the first of: return mean >= target, cap seconds, timesteps.

    With `window` set it measures throughput instead: a warm-up (iterations until the first env steps
    are counted, at most `cap` seconds), then iterations until `window` seconds have passed;
    envStepsPerSecond is over those iterations only.
    """

    algorithm: str  # "PPO", "APPO" or "DQN"
    env: str = "CartPole-v1"
    setup: str = "plain"  # "plain", "atari" or "mujoco"
    sticky: float = 0.25  # "atari": repeat_action_probability (ALE v5's default)
    seed: int = 1
    env_runners: int | None = None  # None: the algorithm's default
    envs_per_runner: int | None = None
    training: dict[str, Any] = field(default_factory=dict)  # extra .training(...) keywords
    learners: dict[str, Any] = field(default_factory=dict)  # extra .learners(...) keywords
    env_runner_options: dict[str, Any] = field(default_factory=dict)  # extra .env_runners(...) keywords
    model: dict[str, Any] = field(default_factory=dict)  # DefaultModelConfig keywords (the setup's otherwise)
    target: float | None = None
    cap: float = 300.0
    timesteps: int | None = None
    window: float | None = None


SCRIPT = r'''
import json, os, sys, time
spec = json.loads(sys.argv[1])
started = time.perf_counter()
import gymnasium as gym
import ray
from ray.tune.registry import register_env
if spec["algorithm"] == "APPO":
    from ray.rllib.algorithms.appo import APPOConfig as Config
elif spec["algorithm"] == "PPO":
    from ray.rllib.algorithms.ppo import PPOConfig as Config
else:
    from ray.rllib.algorithms.dqn import DQNConfig as Config
# A Ray of its own ("local": never someone else's cluster on this machine), with logical CPUs beyond the
# machine's 2: APPO's aggregator actors and env runners otherwise wait unscheduled forever on 2 CPUs.
ray.init(address="local", _node_ip_address="127.0.0.2", include_dashboard=False, log_to_driver=False,
         num_cpus=max(6, os.cpu_count()))
config = Config().debugging(seed=spec["seed"])
runners = {} if spec["env_runners"] is None else {"num_env_runners": spec["env_runners"]}
if spec["envs_per_runner"] is not None:
    runners["num_envs_per_env_runner"] = spec["envs_per_runner"]
runners.update(spec["env_runner_options"])
training = dict(spec["training"])
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
if spec["setup"] == "atari":
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
    env_id = spec["env"]

    def make_atari(cfg):
        import ale_py  # in each env runner's process
        gym.register_envs(ale_py)
        return wrap_atari_for_new_api_stack(gym.make(env_id, **cfg), dim=64, framestack=None)

    register_env("atari", make_atari)
    config.environment("atari", env_config={"frameskip": 1, "full_action_space": False,
                                            "repeat_action_probability": spec["sticky"]}, clip_rewards=True)
    runners["env_to_module_connector"] = lambda env, spaces=None, device=None: FrameStackingEnvToModule(num_frames=4)
    training["learner_connector"] = lambda obs_space, act_space: FrameStackingLearner(num_frames=4)
    config.rl_module(model_config=DefaultModelConfig(
        vf_share_layers=True, conv_filters=[(16, 4, 2), (32, 4, 2), (64, 4, 2), (128, 4, 2)],
        conv_activation="relu", head_fcnet_hiddens=[256]))
elif spec["setup"] == "mujoco":
    from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
    config.environment(spec["env"])
    runners["env_to_module_connector"] = lambda env, spaces=None, device=None: MeanStdFilter()
else:
    config.environment(spec["env"])
if runners:
    config.env_runners(**runners)
if training:
    config.training(**training)
if spec["learners"]:
    config.learners(**spec["learners"])
if spec["model"]:
    config.rl_module(model_config=DefaultModelConfig(**spec["model"]))
algo = config.build_algo()
startup = time.perf_counter() - started

def emit(**line):
    print(json.dumps(line), flush=True)

def figures(result, steps):
    runners_ = result.get("env_runners", {})
    steps = int(result.get("num_env_steps_sampled_lifetime") or runners_.get("num_env_steps_sampled_lifetime") or steps)
    ret = runners_.get("episode_return_mean")
    return steps, None if ret is None else float(ret)

def learner_figures(result):
    """The policy's entropy and losses where RLlib reports them (one module, "default_policy")."""
    stats = (result.get("learners") or {}).get("default_policy") or {}
    figures_ = {}
    for theirs, ours in (("entropy", "entropy"), ("policy_loss", "policyLoss"), ("vf_loss", "valueLoss")):
        try:
            figures_[ours] = float(stats[theirs])
        except (KeyError, TypeError, ValueError):
            pass
    return figures_

steps, ret, first = 0, None, 0
if spec["window"]:
    warm_until = time.perf_counter() + spec["cap"]
    while steps == 0 and time.perf_counter() < warm_until:  # warm-up: env runners up and sampling
        steps, ret = figures(algo.train(), steps)
    first = steps
t0 = time.perf_counter()
while True:
    result = algo.train()
    steps, ret = figures(result, steps)
    elapsed = time.perf_counter() - t0
    emit(progress=True, timeSeconds=elapsed, timesteps=steps, episodeReturnMean=ret, **learner_figures(result))
    if spec["window"]:
        if elapsed >= spec["window"]:
            break
    elif ((spec["target"] is not None and ret is not None and ret >= spec["target"]) or elapsed > spec["cap"]
          or (spec["timesteps"] is not None and steps >= spec["timesteps"])):
        break
emit(done=True, reached=spec["target"] is not None and ret is not None and ret >= spec["target"],
     timeSeconds=elapsed, timesteps=steps, episodeReturnMean=ret, envStepsPerSecond=(steps - first) / elapsed,
     startupSeconds=startup)
algo.stop()
ray.shutdown()
'''


def run_rllib(python: Path, spec: RLlibRun, deadline_seconds: float | None = None, *,
              keep_rows: bool = False) -> dict[str, Any]:
    """The run's final figures plus `curve` [(seconds, return mean)] and the CPU (cpu_model, cpu_bf16,
    cpu_flags), or {"error": ...} with the last progress; with `keep_rows`, also `rows`: every iteration's line
    (env steps, the policy's entropy and losses).

    The default deadline gives Ray's start and RLlib's build (slow on a busy machine) as long again as
    the training's own limit, plus 3 minutes.
    """
    if not python.exists():
        return {"error": f"{python} not found: run `make bench-deps` first"}
    limit = spec.window if spec.window else spec.cap
    run = run_script(python, SCRIPT, [json.dumps(asdict(spec))], deadline_seconds or 2 * limit + 180)
    progress = [line for line in run.lines if line.get("progress")]
    curve = [(line["timeSeconds"], line["episodeReturnMean"]) for line in progress]
    final = [line for line in run.lines if line.get("done")]
    rows = {"rows": progress} if keep_rows else {}
    if final:
        return {**final[-1], "curve": curve, **rows, **cpu_summary()}
    return {"error": run.error(f"RLlib {spec.algorithm}"), "curve": curve, **rows,
            **({"lastProgress": progress[-1]} if progress else {}), **cpu_summary()}


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.3f}" if a and b else "n/a"
