"""Population-based training against random search and TPE, and Ray Tune's PBT beside them.

    .venv/bin/python bench/pbt.py                                    # the sizes in docs/benchmarks.md
    .venv/bin/python bench/pbt.py --smoke                            # tiny sizes: does it run
    .venv/bin/python bench/pbt.py --seeds 1 --methods pbt,random --json out.json --plot docs/pbt_lr_member.png

The task: PPO on Acrobot-v1 with `annealLr`, searching `config.lr` (1e-4..1e-2) and `config.entropyCoeff`
(1e-4..0.1), both on a log scale. It is a task where the learning rate's schedule can matter at a short
budget: a high rate with a large entropy bonus learns and then unlearns late (lr 5.4e-3 with entropyCoeff
0.022 ended at -104.7 as a random trial; as a PBT member that kept them it went -90.8, -79.5, -82.2, -94.6
over four rounds), which PBT can answer by lowering the rate. Its returns are not capped by a limit that
good policies all reach (as CartPole's 500 is), so the best trials of two searches can still be told apart.
Measured, though, most settings reach Acrobot's plateau near -80 by 40k steps, and the methods' best trials
lie within the evaluation's noise (docs/benchmarks.md).

Every method gets the same number of trials (--trials; PBT's population) and the same env steps
(--timesteps per trial; PBT trains its population in --rounds rounds of timesteps / rounds steps), the
same template (the discrete-control PPO defaults, written out), parallelism 2 and the same 3 sweep seeds
(each seed is the search's seed and the template's config.seed). TPE takes its first trials / 2 trials at
random (startupTrials), then its model. All are scored the same way: the objective is
`evaluationReturnMean`, a greedy evaluation of --episodes episodes at the end of each run
(`spec.evaluation`, its interval past the run's last iteration), so a trial's value is its final policy's
evaluation, never a training window. PBT ranks its members by the same evaluation at each round's end
(those evaluation episodes are not training steps; Ray Tune's PBT ranks by the training return).

Ray Tune's PBT (method `rllib`, run with .venv-rllib's python: ray 2.60, never a kuberl dependency):
`ray.tune.schedulers.PopulationBasedTraining` with RLlib's PPO on the same env, population, perturbation
interval (in training iterations of 8 envs x 64 steps, the same env steps), env steps, hyperparameter
ranges (`lr`, `entropy_coeff`, log-uniform; perturbed by 0.8/1.2 or resampled with probability 0.25,
quantile 0.25, synchronous rounds as kuberl's), PPO settings mapped to RLlib's names, 2 CPUs. RLlib's lr
is constant between perturbations (PBT's usual setup: a schedule given as a list cannot be perturbed).
Each member's final policy is scored by the same greedy evaluation of --episodes episodes at its last
iteration.

Per method and sweep seed it prints one JSON line (every trial's value, the best and the median trial, env
steps, CPU-seconds, wall time, the load average before and after), then a table per seed and across the
seeds (the median and the worst seed of the best, the median of the medians). `--plot` draws the
learning rate (`learner.lr`) of one PBT member of the first seed against its env steps, round
boundaries marked. Figures name the CPU (model, native bfloat16 or not).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rllib_runner import DEFAULT_PYTHON, run_script  # noqa: E402

from kuberl.api.sweep_validation import validate_sweep_document  # noqa: E402
from kuberl.sweep.local import LocalSweep, read_results  # noqa: E402
from kuberl.trainer.cpu import cpu_caption, cpu_summary  # noqa: E402

ENV = "Acrobot-v1"
LR = (1e-4, 1e-2)
ENTROPY = (1e-4, 0.1)
ENVS, FRAGMENT = 8, 64  # one iteration: 512 env steps, on both sides
BATCH = ENVS * FRAGMENT
KUBERL_METHODS = ("pbt", "random", "tpe")
METHODS = (*KUBERL_METHODS, "rllib")
PARALLELISM = 2
PBT = {"quantileFraction": 0.25, "resampleProbability": 0.25}


def parameters() -> list[dict[str, Any]]:
    return [{"path": "config.lr", "type": "float", "low": LR[0], "high": LR[1], "log": True},
            {"path": "config.entropyCoeff", "type": "float", "low": ENTROPY[0], "high": ENTROPY[1], "log": True}]


def template(env: str, timesteps: int, seed: int, episodes: int) -> dict[str, Any]:
    """PPO's discrete-control defaults, written out (so the RLlib side can be given the same), annealLr on and
    one greedy evaluation at the end of each run."""
    return {"algorithm": "ppo", "env": {"id": env},
            "config": {"seed": seed, "annealLr": True, "numEpochs": 8, "minibatchSize": 256},
            "rollouts": {"workers": 0, "envsPerWorker": ENVS, "fragmentLength": FRAGMENT},
            "stop": {"timesteps": timesteps}, "checkpoint": {"everyIterations": 10},
            "evaluation": {"interval": 1_000_000, "episodes": episodes}}


def sweep_doc(method: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    search: dict[str, Any] = {"algorithm": method, "seed": seed}
    if method == "pbt":
        search["pbt"] = {"populationSize": args.trials, "perturbationInterval": args.timesteps // args.rounds, **PBT}
    if method == "tpe":
        search["startupTrials"] = args.trials // 2
    spec = {"template": template(args.env, args.timesteps, seed, args.episodes), "parameters": parameters(),
            "objective": {"metric": "evaluationReturnMean", "goal": "maximize"}, "search": search,
            "parallelism": PARALLELISM, **({} if method == "pbt" else {"maxTrials": args.trials})}
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": f"{method}-s{seed}"},
            "spec": spec}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def figures(values: list[float | None]) -> dict[str, Any]:
    done = [v for v in values if v is not None]
    return {"values": values, "best": max(done) if done else None,
            "median": statistics.median(done) if done else None, "failed": len(values) - len(done)}


def run_kuberl(method: str, args: argparse.Namespace, seed: int, directory: Path) -> dict[str, Any]:
    sweep = validate_sweep_document(sweep_doc(method, args, seed))
    before, started = load(), time.monotonic()
    runner = LocalSweep(sweep, directory, out=io.StringIO(), fresh=True)
    runner.run()
    trials = runner.state.trials
    return {"method": method, "seed": seed, **figures([t.value for t in trials]),
            "params": [t.params for t in trials],
            "envSteps": sum(c.timesteps for c in runner.costs.values()),
            "cpuSeconds": round(sum(c.cpu_seconds for c in runner.costs.values()), 1),
            "wallSeconds": round(time.monotonic() - started, 1), "load": {"before": before, "after": load()}}


# -- Ray Tune's PBT ------------------------------------------------------------------------------------------
RAY_SCRIPT = r'''
import json, os, random, sys, time
spec = json.loads(sys.argv[1])
random.seed(spec["seed"])  # PBT's exploit and explore draws
# The first iterations end no episode, so their results have no return yet: Tune would refuse them.
os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
import ray
from ray import tune
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.tune.schedulers import PopulationBasedTraining
from ray.tune.search.basic_variant import BasicVariantGenerator

ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False,
         num_cpus=spec["cpus"])
batch = spec["envs"] * spec["fragment"]
iterations = spec["timesteps"] // batch
lr = tune.loguniform(*spec["lr"])
entropy = tune.loguniform(*spec["entropy"])
config = (PPOConfig().environment(spec["env"])
          .env_runners(num_env_runners=0, num_envs_per_env_runner=spec["envs"],
                       rollout_fragment_length=spec["fragment"])
          .training(lr=lr, entropy_coeff=entropy, train_batch_size_per_learner=batch, minibatch_size=256,
                    num_epochs=8, gamma=0.99, lambda_=0.95, clip_param=0.2, vf_clip_param=10.0, vf_loss_coeff=0.5,
                    grad_clip=0.5, grad_clip_by="global_norm", use_kl_loss=False)
          .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh",
                                                     vf_share_layers=False))
          .evaluation(evaluation_interval=iterations, evaluation_duration=spec["episodes"],
                      evaluation_duration_unit="episodes", evaluation_num_env_runners=0,
                      evaluation_config=PPOConfig.overrides(explore=False))
          .debugging(seed=tune.randint(0, 2**31 - 1)))
pbt = PopulationBasedTraining(
    time_attr="training_iteration", perturbation_interval=spec["interval"] // batch,
    hyperparam_mutations={"lr": lr, "entropy_coeff": entropy}, quantile_fraction=0.25, resample_probability=0.25,
    perturbation_factors=(1.2, 0.8), synch=True, require_attrs=False)
started = time.perf_counter()
tuner = tune.Tuner(
    "PPO", param_space=config,
    tune_config=tune.TuneConfig(metric="env_runners/episode_return_mean", mode="max", scheduler=pbt,
                                num_samples=spec["trials"], max_concurrent_trials=spec["cpus"],
                                search_alg=BasicVariantGenerator(random_state=spec["seed"])),
    run_config=tune.RunConfig(name="pbt", storage_path=spec["dir"], verbose=0,
                              stop={"training_iteration": iterations}))
grid = tuner.fit()

def num(v):
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if v != v else v

def get(d, path):
    for part in path.split("/"):
        d = d.get(part) if isinstance(d, dict) else None
    return num(d)

for result in grid:
    m = result.metrics or {}
    rows = []
    if result.metrics_dataframe is not None:
        frame = result.metrics_dataframe
        for _, row in frame.iterrows():
            rows.append({k: num(v) for k, v in (
                ("timesteps", row.get("num_env_steps_sampled_lifetime")),
                ("lr", row.get("config/lr")), ("entropyCoeff", row.get("config/entropy_coeff")),
                ("episodeReturnMean", row.get("env_runners/episode_return_mean")))})
    print(json.dumps({"trial": True, "evaluation": get(m, "evaluation/env_runners/episode_return_mean"),
                      "episodeReturnMean": get(m, "env_runners/episode_return_mean"),
                      "iteration": m.get("training_iteration"),
                      "timesteps": num(m.get("num_env_steps_sampled_lifetime")),
                      "lr": get(m, "config/lr"), "entropyCoeff": get(m, "config/entropy_coeff"),
                      "error": None if result.error is None else str(result.error)[-500:], "rows": rows},
                     default=float), flush=True)
print(json.dumps({"done": True, "wallSeconds": time.perf_counter() - started}), flush=True)
ray.shutdown()
'''


def run_rllib_pbt(args: argparse.Namespace, seed: int, directory: Path) -> dict[str, Any]:
    python = Path(args.rllib_python)
    before, started = load(), time.monotonic()
    if not python.exists():
        return {"method": "rllib", "seed": seed, "error": f"{python} not found: run `make bench-deps` first"}
    directory.mkdir(parents=True, exist_ok=True)
    spec = {"env": args.env, "seed": seed, "trials": args.trials, "timesteps": args.timesteps,
            "interval": args.timesteps // args.rounds, "episodes": args.episodes, "envs": ENVS,
            "fragment": FRAGMENT, "lr": list(LR), "entropy": list(ENTROPY), "cpus": PARALLELISM,
            "dir": str(directory.resolve())}
    run = run_script(python, RAY_SCRIPT, [json.dumps(spec)], args.rllib_deadline)
    trials = [line for line in run.lines if line.get("trial")]
    out = {"method": "rllib", "seed": seed, **figures([t["evaluation"] for t in trials]),
           "params": [{"lr": t["lr"], "entropy_coeff": t["entropyCoeff"]} for t in trials],
           "trainingReturns": [t["episodeReturnMean"] for t in trials],
           "envSteps": sum(int(t["timesteps"] or 0) for t in trials),
           "wallSeconds": round(time.monotonic() - started, 1), "load": {"before": before, "after": load()},
           "lrRows": [[(r["timesteps"], r["lr"]) for r in t["rows"]] for t in trials]}
    if not any(line.get("done") for line in run.lines) or len(trials) < args.trials:
        out["error"] = run.error("Ray Tune PBT")
    errors = [t["error"] for t in trials if t.get("error")]
    if errors:
        out["trialErrors"] = errors
    return out


# -- the learning-rate curve of a PBT member --------------------------------------------------------------
def member_lr(directory: Path, sweep: str, trials: int, rounds: int) -> dict[int, list[list[tuple[int, float]]]]:
    """Each member's (timesteps, learner.lr) per round, from its runs' results.jsonl."""
    curves: dict[int, list[list[tuple[int, float]]]] = {}
    for member in range(trials):
        curves[member] = []
        for r in range(rounds):
            results = read_results(directory / "runs" / f"{sweep}-t{member:03d}-r{r:02d}")
            curves[member].append([(int(x["timesteps"]), float(x["learner"]["lr"])) for x in results
                                   if isinstance(x.get("learner"), dict) and "lr" in x["learner"]])
    return curves


def copies(directory: Path, sweep: str, trials: int, rounds: int) -> dict[int, dict[int, str]]:
    """Per member, the rounds it started from another member's checkpoint: {round: that member's run}, from each
    round's manifest (checkpoint.restoreFrom)."""
    import yaml

    found: dict[int, dict[int, str]] = {}
    for member in range(trials):
        found[member] = {}
        for r in range(1, rounds):
            manifest = directory / "runs" / f"{sweep}-t{member:03d}-r{r:02d}.yaml"
            if not manifest.exists():
                continue
            source = ((yaml.safe_load(manifest.read_text())["spec"].get("checkpoint") or {}).get("restoreFrom") or "")
            donor = next((part for part in source.split("/") if part.startswith(f"{sweep}-t")), "")
            if donor and not donor.startswith(f"{sweep}-t{member:03d}-"):
                found[member][r] = donor
    return found


def pick_member(lineage: dict[int, dict[int, str]], values: list[float | None]) -> int:
    """The member to draw: the best of those that copied a donor's checkpoint at least once (its schedule goes on
    from the donor's step with a perturbed rate), else the best."""
    candidates = [m for m, rounds in lineage.items() if rounds] or list(lineage)
    return max(candidates, key=lambda m: float("-inf") if values[m] is None else values[m])


def plot_lr(curves: dict[int, list[list[tuple[int, float]]]], member: int, notes: dict[int, str], interval: int,
            timesteps: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    for other, rounds in curves.items():
        if other != member:
            points = [p for segment in rounds for p in segment]
            ax.plot([p[0] for p in points], [p[1] for p in points], color="0.78", lw=1)
    for r, segment in enumerate(curves[member]):
        ax.plot([p[0] for p in segment], [p[1] for p in segment], marker=".", ms=3, lw=1.8, color=f"C{r}",
                label=f"member {member}, round {r}" + (f": from {notes[r]}'s checkpoint, perturbed" if r in notes
                                                       else ""))
    for boundary in range(interval, timesteps, interval):
        ax.axvline(boundary, color="k", ls="--", lw=0.8)
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, timesteps)
    ax.set_xlabel("env steps")
    ax.set_ylabel("learner.lr")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, title="grey: the other members; dashed: the rounds' ends", title_fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_member(args: argparse.Namespace, directory: Path, seed: int, values: list[float | None],
                cpu: dict[str, Any]) -> dict[str, Any]:
    """The --plot figure from the first seed's PBT sweep; what it draws comes back (for the JSON)."""
    sweep, interval = f"pbt-s{seed}", args.timesteps // args.rounds
    lineage = copies(directory, sweep, args.trials, args.rounds)
    curves = member_lr(directory, sweep, args.trials, args.rounds)
    member = pick_member(lineage, values)
    plot_lr(curves, member, lineage[member], interval, args.timesteps, Path(args.plot),
            f"kuberl PBT, PPO on {args.env} with annealLr, sweep seed {seed}: member {member}'s learning rate\n"
            f"{args.trials} members, {args.rounds} rounds of {interval:,} env steps; "
            f"{cpu_caption(cpu)}")
    return {"seed": seed, "member": member, "copied": lineage[member], "lr": curves[member]}


# -- the table --------------------------------------------------------------------------------------------
def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def across(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    mine = [r for r in rows if r["method"] == method and r.get("best") is not None]
    if not mine:
        return {"method": method, "seeds": 0}
    bests = [r["best"] for r in mine]
    return {"method": method, "seeds": len(mine), "medianBest": statistics.median(bests), "worstBest": min(bests),
            "medianMedian": statistics.median(r["median"] for r in mine)}


def table(rows: list[dict[str, Any]], methods: list[str]) -> str:
    lines = ["| method | seed | best | median | trials' values | env steps | wall s | load before/after |",
             "|---|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        values = ", ".join(_f(v) for v in r.get("values", []))
        load_ = f"{r['load']['before'][0]} / {r['load']['after'][0]}" if "load" in r else "-"
        lines.append(f"| {r['method']} | {r['seed']} | {_f(r.get('best'))} | {_f(r.get('median'))} | {values} | "
                     f"{r.get('envSteps', 0):,} | {r.get('wallSeconds', '-')} | {load_} |")
    lines += ["", "| method | seeds | median of the best | worst seed's best | median of the medians |",
              "|---|---:|---:|---:|---:|"]
    for method in methods:
        a = across(rows, method)
        lines.append(f"| {method} | {a['seeds']} | {_f(a.get('medianBest'))} | {_f(a.get('worstBest'))} | "
                     f"{_f(a.get('medianMedian'))} |")
    ranked_by_training = [r for r in rows if r.get("trainingReturns")]  # what Ray Tune's PBT ranks its members by
    lines += [""] * bool(ranked_by_training) + [
        f"{r['method']} seed {r['seed']}: training return at the end " + ", ".join(_f(v) for v in r["trainingReturns"])
        for r in ranked_by_training]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3", help="sweep seeds, comma-separated")
    parser.add_argument("--trials", type=int, default=4, help="trials of each search; PBT's population")
    parser.add_argument("--timesteps", type=int, default=40_960, help="env steps of each trial (a multiple of "
                        f"{BATCH} x --rounds keeps both sides' rounds whole)")
    parser.add_argument("--rounds", type=int, default=4, help="PBT's rounds: perturbation interval = timesteps / rounds")
    parser.add_argument("--episodes", type=int, default=20, help="greedy evaluation episodes scoring each trial")
    parser.add_argument("--env", default=ENV)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    parser.add_argument("--rllib-seeds", help="sweep seeds for Ray Tune's PBT (default: --seeds)")
    parser.add_argument("--rllib-python", default=str(DEFAULT_PYTHON))
    parser.add_argument("--rllib-deadline", type=float, default=1200.0, help="seconds per Ray Tune sweep")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the benchmark runs")
    parser.add_argument("--dir", help="where the sweeps go (default: a temporary directory)")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--plot", help="draw one PBT member's learning rate of the first seed here (PNG)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.trials, args.timesteps, args.rounds, args.episodes = 2, 4096, 2, 3
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)} (of {', '.join(METHODS)})")
    if args.timesteps % args.rounds or (args.timesteps // args.rounds) % BATCH:
        parser.error(f"--timesteps: {args.timesteps} / --rounds {args.rounds} must be a multiple of {BATCH} env steps "
                     "(one iteration on both sides)")
    seeds = [int(s) for s in args.seeds.split(",")]
    rllib_seeds = [int(s) for s in args.rllib_seeds.split(",")] if args.rllib_seeds else seeds
    cpu = cpu_summary()
    header = {"env": args.env, "trials": args.trials, "timesteps": args.timesteps, "rounds": args.rounds,
              "perturbationInterval": args.timesteps // args.rounds, "episodes": args.episodes,
              "lr": LR, "entropyCoeff": ENTROPY, "parallelism": PARALLELISM, "seeds": seeds, "rllibSeeds": rllib_seeds,
              "objective": "evaluationReturnMean", "cpus": os.cpu_count(), **cpu,
              "date": datetime.now(UTC).strftime("%Y-%m-%d"), "command": " ".join(["bench/pbt.py", *(argv or sys.argv[1:])])}
    print(json.dumps({"bench": "pbt", **header}), flush=True)
    rows: list[dict[str, Any]] = []
    drawn: dict[str, Any] | None = None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kuberl-bench-pbt-") as tmp:
        work = Path(args.dir) if args.dir else Path(tmp)
        for seed in seeds:
            for method in [m for m in methods if m in KUBERL_METHODS]:
                directory = work / f"{method}-s{seed}"
                row = run_kuberl(method, args, seed, directory)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if method == "pbt" and args.plot and seed == seeds[0]:
                    drawn = draw_member(args, directory, seed, row["values"], cpu)
                    print(json.dumps({"plot": args.plot, **drawn}), flush=True)
            if "rllib" in methods and seed in rllib_seeds:
                row = run_rllib_pbt(args, seed, work / f"rllib-s{seed}")
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "lrRows"}), flush=True)
    summary = [across(rows, m) for m in methods]
    out = {**header, "wallSeconds": round(time.monotonic() - started, 1), "runs": rows, "across": summary,
           "lrMember": drawn}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    print(table(rows, methods))
    by = {a["method"]: a for a in summary}
    if by.get("pbt", {}).get("medianBest") is not None and by.get("random", {}).get("medianBest") is not None:
        verdict = "not worse" if by["pbt"]["medianBest"] >= by["random"]["medianBest"] else "WORSE"
        print(f"PBT's median best {by['pbt']['medianBest']:.1f} is {verdict} than random search's "
              f"{by['random']['medianBest']:.1f}")
    print(json.dumps({"bench": "pbt", **{k: header[k] for k in ("env", "cpu_model", "cpu_bf16")},
                      "across": summary}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
