"""Multi-agent benchmarks: kuberl's shared PPO policy on mpe2's simple_spread_v3 (N=3, discrete actions, 25
steps) against RLlib 2.60's multi-agent PPO, same env steps, per seed; and kuberl's learning figures on the
heterogeneous simple_speaker_listener_v4 (two policies) and the pixel env pistonball_v6 (one shared conv policy).

    .venv/bin/python -m bench.multiagent --smoke                      # 2,000 env steps, one seed, kuberl only
    .venv/bin/python -m bench.multiagent --smoke --env-steps 20000 --rllib   # both sides run: a smoke check
    .venv/bin/python -m bench.multiagent --seeds 1,2                  # spread: 333,334 env steps = 1M agent steps
    make bench-deps && .venv/bin/python -m bench.multiagent --rllib --seeds 1,2 --out ma.json   # the comparison
    .venv/bin/python -m bench.multiagent --task speaker-listener --env-steps 150000 --plot sl.png   # a policy each
    .venv/bin/python -m bench.multiagent --task pistonball --env-steps 80000 --random-episodes 400 --plot pb.png
    .venv/bin/python -m bench.multiagent --task pistonball --merge s1.json s2.json --out pb.json --plot pb.png

The goal of the spread comparison: kuberl's worst seed's final team return >= RLlib's best seed's, in at most
0.5x RLlib's wall time. Both clocks start at the first train() call (Ray's start and the build are reported
apart); the team return is the sum over agents of an episode's rewards, the mean of the last 100 episodes on
both sides (RLlib's `episode_return_mean` of a multi-agent env sums its agents). Both count env steps
(`timesteps`; RLlib's `num_env_steps_sampled_lifetime`) and report agent steps beside them.

RLlib's side (`RLLIB_SCRIPT`, run with .venv-rllib's python): its PettingZoo wrapper `ParallelPettingZooEnv`
around `simple_spread_v3.parallel_env`, one module `shared` for every agent through `policy_mapping_fn`, and
kuberl's PPO settings in RLlib's names (`RLLIB_TRAINING`, `RLLIB_MODEL`: why each, beside them), sampled by
RLlib's default 2 env runners of 4 envs each (the same 8 envs x 100 steps a batch); `--rllib-defaults` runs
RLlib's own PPO defaults instead.

Every run's figures (kuberl's and RLlib's, in --out) name the CPU they ran on: cpu_model, cpu_bf16 (native
bfloat16) and cpu_flags; the first line printed names it too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from rllib_runner import DEFAULT_PYTHON, ratio, run_script  # noqa: E402

AGENTS = 3
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# Each task trains its example's env, wrappers, settings and policies (the example's seed aside).
TASK_EXAMPLES = {"spread": "multiagent-spread-ppo.yaml", "speaker-listener": "multiagent-speaker-listener.yaml",
                 "pistonball": "multiagent-pistonball-ppo.yaml"}


def task_spec(task: str, workers: int = 0) -> dict[str, Any]:
    """The example's spec without its cluster parts, its envs and fragments sampled by `workers` rollout workers
    (0: in the learner's process) that share the example's envs out between them, so a batch holds the same env
    steps however many sample it (RLlib's env runners share their envs the same way)."""
    import yaml

    from kuberl.api.defaults import resolved_defaults
    from kuberl.api.validation import load_manifest
    from kuberl.trainer.run.task_defaults import detect_task_kind

    text = (EXAMPLES / TASK_EXAMPLES[task]).read_text()
    spec = yaml.safe_load(text)["spec"]
    example = load_manifest(text)  # the envs the example trains with: its own, else its task kind's set's
    kind = detect_task_kind(example)
    envs = (resolved_defaults(example, kind)[1] if kind else {}).get("rollouts.envsPerWorker",
                                                                     example.spec.rollouts.envs_per_worker)
    if workers > 1 and envs % workers:
        raise SystemExit(f"bench/multiagent.py: --workers {workers} does not share the example's {envs} envs evenly")
    rollouts = {"workers": workers, "envsPerWorker": envs // max(1, workers),
                "fragmentLength": spec["rollouts"]["fragmentLength"]}
    return {"algorithm": spec["algorithm"], "env": spec["env"], "rollouts": rollouts,
            "config": {k: v for k, v in spec["config"].items() if k != "seed"},
            **({"multiAgent": spec["multiAgent"]} if "multiAgent" in spec else {})}


def kuberl_run(task: str, seed: int, env_steps: int, workers: int = 0) -> dict[str, Any]:
    from kuberl.api.validation import validate_document
    from kuberl.trainer.algorithms.config import AlgorithmConfig
    from kuberl.trainer.cpu import cpu_summary
    from kuberl.trainer.run.task_defaults import resolve_task_defaults

    spec = {**task_spec(task, workers), "stop": {"timesteps": env_steps}}
    spec["config"]["seed"] = seed
    experiment = validate_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                    "metadata": {"name": f"bench-{task}"}, "spec": spec})
    # The task kind's defaults where the example leaves values unset, as `kuberl train` trains it.
    experiment, defaults = resolve_task_defaults(experiment)
    if defaults is not None:
        print(f"  {defaults.line()}", flush=True)
    started = time.perf_counter()
    algo = AlgorithmConfig.from_experiment(experiment).build()
    startup = time.perf_counter() - started
    t0 = time.perf_counter()
    curve: list[tuple[float, int, float | None]] = []  # (seconds since the build began, env steps, team return)
    agent_steps = 0
    try:
        while algo.timesteps < env_steps:
            result = algo.train()
            agent_steps += result["agentSteps"]
            curve.append((time.perf_counter() - started, result["timesteps"], result["episodeReturnMean"]))
            if len(curve) % 20 == 1:
                print(f"  {curve[-1][0]:.0f}s {curve[-1][1]:,} env steps: team return {curve[-1][2]}", flush=True)
        elapsed = time.perf_counter() - t0
        evaluation = algo.evaluate(20)
        sampled = algo.evaluate(20, explore=True)  # the policy as it trains: actions drawn, not argmax
    finally:
        algo.stop()
    return {"side": "kuberl", "task": task, "seed": seed, "timeSeconds": elapsed, "startupSeconds": startup,
            "timesteps": result["timesteps"], "agentSteps": agent_steps, "episodeReturnMean": result["episodeReturnMean"],
            "firstReturnMean": next((r for _, _, r in curve if r is not None), None),
            "evaluationReturnMean": evaluation["episodeReturnMean"],
            "sampledEvaluationReturnMean": sampled["episodeReturnMean"],
            "policies": {name: p["episodeReturnMean"] for name, p in result["policies"].items()}, "curve": curve,
            **cpu_summary()}


RLLIB_SCRIPT = r"""
import json, os, sys, time
spec = json.loads(sys.argv[1])
started = time.perf_counter()
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.tune.registry import register_env

# kuberl's multiAgent.agentIdFeature on RLlib's side: a one-hot of the agent's index (in the env's own order of
# agents) appended to its observation.
class AgentIdFeature:

    def __init__(self, env):
        import gymnasium as gym
        import numpy as np
        self.env, self.np = env, np
        self.index = {agent: i for i, agent in enumerate(env.possible_agents)}
        self.spaces = {}
        for agent in env.possible_agents:
            space = env.observation_space(agent)
            ones = np.ones(len(self.index), dtype=space.dtype)
            self.spaces[agent] = gym.spaces.Box(np.concatenate([space.low, 0 * ones]), np.concatenate([space.high, ones]),
                                                dtype=space.dtype)

    def __getattr__(self, name):
        return getattr(self.env, name)

    def observation_space(self, agent):
        return self.spaces[agent]

    def _with_id(self, observations):
        out = {}
        for agent, obs in observations.items():
            one_hot = self.np.zeros(len(self.index), dtype=obs.dtype)
            one_hot[self.index[agent]] = 1
            out[agent] = self.np.concatenate([obs, one_hot])
        return out

    def reset(self, *args, **kwargs):
        observations, infos = self.env.reset(*args, **kwargs)
        return self._with_id(observations), infos

    def step(self, actions):
        observations, *rest = self.env.step(actions)
        return (self._with_id(observations), *rest)

def make_spread(cfg):
    from mpe2 import simple_spread_v3  # in each env runner's process
    env = simple_spread_v3.parallel_env(**cfg["env"])
    return ParallelPettingZooEnv(AgentIdFeature(env) if cfg["agent_id_feature"] else env)

register_env("spread", make_spread)
# A Ray of its own ("local": never someone else's cluster on this machine), with logical CPUs beyond a small
# machine's cores, as bench/rllib_runner.py does.
ray.init(address="local", _node_ip_address="127.0.0.2", include_dashboard=False, log_to_driver=False,
         num_cpus=max(6, os.cpu_count()))
config = (PPOConfig()
          .environment("spread", env_config={"env": spec["env_config"], "agent_id_feature": spec["agent_id_feature"]})
          # One policy (RLModule) shared by every agent: parameter sharing, as kuberl's default `shared` policy.
          .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, *args, **kwargs: "shared")
          .debugging(seed=spec["seed"]))
if spec["training"]:
    config.training(**spec["training"])
if spec["model"]:
    config.rl_module(model_config=DefaultModelConfig(**spec["model"]))
if spec["env_runners"]:
    config.env_runners(**spec["env_runners"])
algo = config.build_algo()
startup = time.perf_counter() - started

def emit(**line):
    print(json.dumps(line), flush=True)

def agent_steps_of(runners):
    steps = runners.get("num_agent_steps_sampled_lifetime")
    return int(sum(steps.values())) if isinstance(steps, dict) else steps

steps, agent_steps, ret, first = 0, None, None, None
t0 = time.perf_counter()
while steps < spec["env_steps"]:
    result = algo.train()
    runners = result.get("env_runners", {})
    steps = int(runners.get("num_env_steps_sampled_lifetime") or result.get("num_env_steps_sampled_lifetime") or 0)
    agent_steps = agent_steps_of(runners)
    ret = runners.get("episode_return_mean")
    ret = None if ret is None else float(ret)
    first = ret if first is None else first
    emit(progress=True, timeSeconds=time.perf_counter() - t0, timesteps=steps, agentSteps=agent_steps,
         episodeReturnMean=ret)
emit(done=True, timeSeconds=time.perf_counter() - t0, timesteps=steps, agentSteps=agent_steps,
     episodeReturnMean=ret, firstReturnMean=first, startupSeconds=startup)
algo.stop()
ray.shutdown()
"""


# kuberl's spread settings (examples/multiagent-spread-ppo.yaml and PPOParams' defaults) in RLlib 2.60's names; --rllib-defaults: none
# of these, RLlib's own PPO defaults (lr 5e-5, 30 epochs, minibatches of 128, lambda 1.0, clip 0.3, a KL loss,
# 4,000 env steps a batch, [256, 256] layers). RLlib has no tuned example for MPE; its multi-agent tuned PPO
# examples (tuned_examples/ppo/multi_agent_{cartpole,pendulum}_ppo.py) keep lr 3e-4 and a shared-policy mapping
# like this one, and set little else, so kuberl's values are the fairer common ground. Each maps one kuberl value:
RLLIB_TRAINING: dict[str, Any] = {
    "lr": 0.0003, "num_epochs": 10, "entropy_coeff": 0.01,  # the example's config
    "gamma": 0.99, "lambda_": 0.95, "clip_param": 0.2, "vf_clip_param": 10.0, "vf_loss_coeff": 0.5,
    "grad_clip": 0.5, "grad_clip_by": "global_norm",  # PPOParams' defaults
    "use_kl_loss": False,  # kuberl's PPO has no KL penalty (targetKl unset)
    # RLlib counts its train batch in env steps (count_steps_by="env_steps"): 8 envs x 100 steps = 800 env steps,
    # 2,400 agent steps for the shared module, as kuberl's iteration; minibatches are rows of one module, as ours.
    "train_batch_size_per_learner": 8 * 100, "minibatch_size": 256,
}
# kuberl's vector policy: two tanh layers of 64, a critic of its own (RLlib's vf_share_layers=False).
RLLIB_MODEL: dict[str, Any] = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}
# RLlib's default 2 env runners (sampling in parallel to the learner, as RLlib runs by default), 4 envs each: the
# same 8 envs, and rollout_fragment_length "auto" makes it 100 steps each, as kuberl's fragments.
RLLIB_ENV_RUNNERS = 2
RLLIB_ENVS_PER_RUNNER = 4


def rllib_spec(seed: int, env_steps: int, env_runners: int | None, rllib_defaults: bool) -> dict[str, Any]:
    """The RLlib script's argument: the run, and what differs from RLlib's defaults."""
    runners = {} if rllib_defaults else {"num_env_runners": RLLIB_ENV_RUNNERS,
                                         "num_envs_per_env_runner": RLLIB_ENVS_PER_RUNNER}
    if env_runners is not None:
        runners["num_env_runners"] = env_runners
    spec = task_spec("spread")
    return {"seed": seed, "env_steps": env_steps, "env_config": spec["env"]["config"],
            # the example's agent-id feature, which RLlib has no switch for: the script's own wrapper
            "agent_id_feature": not rllib_defaults and spec.get("multiAgent", {}).get("agentIdFeature", False),
            "training": {} if rllib_defaults else RLLIB_TRAINING, "model": {} if rllib_defaults else RLLIB_MODEL,
            "env_runners": runners}


def rllib_run(python: Path, seed: int, env_steps: int, env_runners: int | None,
              rllib_defaults: bool = False) -> dict[str, Any]:
    from kuberl.trainer.cpu import cpu_summary

    if not python.exists():
        return {"side": "rllib", "seed": seed, "error": f"{python} not found: run `make bench-deps` first"}
    spec = rllib_spec(seed, env_steps, env_runners, rllib_defaults)
    run = run_script(python, RLLIB_SCRIPT, [json.dumps(spec)], deadline_seconds=6 * 3600)
    final = [line for line in run.lines if line.get("done")]
    if not final:
        return {"side": "rllib", "seed": seed, "error": run.error("RLlib PPO"), **cpu_summary()}
    curve = [(line["timesteps"], line["episodeReturnMean"]) for line in run.lines if line.get("progress")]
    return {"side": "rllib", "seed": seed, **{k: v for k, v in final[-1].items() if k != "done"},
            "curve": curve[:: max(1, len(curve) // 20)], **cpu_summary()}


def goal(kuberl: list[dict[str, Any]], rllib: list[dict[str, Any]]) -> dict[str, Any]:
    """kuberl's worst seed against RLlib's best, and the wall-time ratio of the slowest runs."""
    ours = [r["episodeReturnMean"] for r in kuberl if r.get("episodeReturnMean") is not None]
    theirs = [r["episodeReturnMean"] for r in rllib if r.get("episodeReturnMean") is not None]
    if not ours or not theirs:
        return {"met": None, "why": "missing results"}
    time_ratio = max(r["timeSeconds"] for r in kuberl) / max(r["timeSeconds"] for r in rllib)
    return {"kuberlWorstReturn": min(ours), "rllibBestReturn": max(theirs), "timeRatio": time_ratio,
            "met": min(ours) >= max(theirs) and time_ratio <= 0.5}


def random_play(task: str, episodes: int, seed: int = 1000) -> dict[str, Any]:
    """The team return of uniformly random actions in the task's env (its `env.config`; wrappers change only the
    observations), over `episodes` episodes on seeds `seed`, `seed + 1`, ...: the level a learning curve must leave."""
    import numpy as np

    from kuberl.trainer.multiagent.envs import make_parallel_env

    env_spec = task_spec(task)["env"]
    env = make_parallel_env(env_spec["id"], env_spec.get("config"))
    rng = np.random.default_rng(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total = 0.0
        while env.agents:
            actions = {agent: int(rng.integers(env.action_space(agent).n)) for agent in env.agents}
            total += sum(env.step(actions)[1].values())
        returns.append(total)
    env.close()
    team = np.asarray(returns)
    windows = [float(team[i:i + 100].mean()) for i in range(0, episodes - 99, 100)]
    return {"episodes": episodes, "teamReturnMean": float(team.mean()),
            "standardError": float(team.std() / np.sqrt(episodes)), "windows100": windows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASK_EXAMPLES), default="spread")
    parser.add_argument("--workers", type=int, default=0, help="kuberl's rollout workers (0: in-process sampling)")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--env-steps", type=int, default=None, help="default: 1M agent steps (spread: 333,334)")
    parser.add_argument("--smoke", action="store_true", help="one seed, 2,000 env steps unless --env-steps")
    parser.add_argument("--rllib", action="store_true", help="also RLlib 2.60 (spread only)")
    parser.add_argument("--rllib-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--rllib-env-runners", type=int, default=None,
                        help=f"default: {RLLIB_ENV_RUNNERS} of {RLLIB_ENVS_PER_RUNNER} envs (--rllib-defaults: RLlib's)")
    parser.add_argument("--rllib-defaults", action="store_true", help="RLlib's PPO defaults, not kuberl's settings")
    parser.add_argument("--out", type=Path, help="write every run's figures here as JSON")
    parser.add_argument("--plot", type=Path, help="draw kuberl's curves (team return against time and env steps)")
    parser.add_argument("--random-episodes", type=int, default=0,
                        help="also play this many episodes with random actions: the baseline (discrete actions)")
    parser.add_argument("--merge", type=Path, nargs="+",
                        help="train nothing: gather the runs (and random play) of these --out files, seeds run side by "
                             "side as processes of their own, into --out and --plot")
    args = parser.parse_args()
    if args.merge:
        saved = [json.loads(path.read_text()) for path in args.merge]
        baseline = next((part["randomPlay"] for part in saved if part.get("randomPlay")), None)
        write_figures(args, [run for part in saved for run in part["kuberl"]],
                      [run for part in saved for run in part.get("rllib", [])], baseline)
        return
    seeds = [int(s) for s in args.seeds.split(",")][:1 if args.smoke else None]
    env_steps = args.env_steps or (2_000 if args.smoke else -(-1_000_000 // AGENTS))
    from kuberl.trainer.cpu import cpu_caption

    print(cpu_caption(), flush=True)

    runs = []
    for seed in seeds:
        run = kuberl_run(args.task, seed, env_steps, args.workers)
        runs.append(run)
        print(f"kuberl {args.task} seed {seed}: team return {run['firstReturnMean']:.1f} -> "
              f"{run['episodeReturnMean']:.1f} (greedy {run['evaluationReturnMean']:.1f}, sampled "
              f"{run['sampledEvaluationReturnMean']:.1f}) after "
              f"{run['timesteps']:,} env steps ({run['agentSteps']:,} agent steps) in {run['timeSeconds']:.0f}s; "
              f"policies {run['policies']}", flush=True)
    rllib_runs = []
    if args.rllib and args.task == "spread":
        for seed in seeds:
            run = rllib_run(args.rllib_python, seed, env_steps, args.rllib_env_runners, args.rllib_defaults)
            rllib_runs.append(run)
            if "error" in run:
                print(f"rllib seed {seed}: {run['error']}", flush=True)
            else:
                print(f"rllib spread seed {seed}: team return {run['firstReturnMean']} -> {run['episodeReturnMean']} "
                      f"after {run['timesteps']:,} env steps ({run['agentSteps']} agent steps) in "
                      f"{run['timeSeconds']:.0f}s (startup {run['startupSeconds']:.0f}s)", flush=True)
        by_seed = {r["seed"]: r for r in rllib_runs if "error" not in r}
        for run in runs:
            other = by_seed.get(run["seed"])
            if other:
                print(f"seed {run['seed']}: time kuberl/rllib {ratio(run['timeSeconds'], other['timeSeconds'])}, "
                      f"return kuberl {run['episodeReturnMean']:.1f} vs rllib {other['episodeReturnMean']}")
        print("goal:", json.dumps(goal(runs, [r for r in rllib_runs if "error" not in r])))
    baseline = random_play(args.task, args.random_episodes) if args.random_episodes else None
    if baseline:
        print(f"random play, {baseline['episodes']} episodes: team return {baseline['teamReturnMean']:.1f} "
              f"+- {baseline['standardError']:.1f} (100-episode windows {[round(w, 1) for w in baseline['windows100']]})",
              flush=True)
    write_figures(args, runs, rllib_runs, baseline)


def write_figures(args: argparse.Namespace, runs: list[dict[str, Any]], rllib_runs: list[dict[str, Any]],
                  baseline: dict[str, Any] | None) -> None:
    if args.out:
        args.out.write_text(json.dumps({"kuberl": runs, "rllib": rllib_runs, "randomPlay": baseline}, indent=1))
    if args.plot:
        from score_curve import plot_score

        plot_score({f"kuberl seed {r['seed']}": [p for p in r["curve"] if p[2] is not None] for r in runs},
                   baseline["teamReturnMean"] if baseline else None,
                   f"{task_spec(args.task)['env']['id']}: kuberl PPO" + (" (dashed: random play)" if baseline else ""),
                   args.plot,
                   score_label="100-episode mean team return", steps_label="env steps (millions; every agent acts)")


if __name__ == "__main__":
    main()
