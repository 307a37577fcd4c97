"""The defaults matrix: each task trained from a manifest that holds only `algorithm`, `env.id`, `seed` and
`stop.timesteps` (and `env.preprocessing: atari` for images), against its published reference at the same
budget; the worst seed is what counts.

    .venv/bin/python -m bench.defaults                                  # every row, seeds 1 and 2
    .venv/bin/python -m bench.defaults --rows ppo-cartpole --seeds 1 --timesteps 50000   # a smoke row
    .venv/bin/python -m bench.defaults --list                           # the rows and their references
    .venv/bin/python -m bench.defaults --reuse results.json --plot rows.png   # the curves of an earlier --json
    .venv/bin/python -m bench.defaults --merge seed1.json seed2.json --json both.json   # seeds run side by side
    .venv/bin/python -m bench.defaults --merge a.json b.json --rows ppo-hopper           # only these rows of them

Each run is `kuberl train -f MANIFEST --storage file://... --quiet` in its own process (its own Ray), one
after another. The return is the run's last 100-episode return mean (`episodeReturnMean` of the last results
line); the first results line's `defaults` record says which set and which machine values were chosen; each seed's curve (the return
against env steps, about 200 points) and its best return go into --json. The
table marks a row `yes` where the worst seed is at or above the reference, `no` below it, and `-` where no
reference at that budget was published (or --timesteps cut the budget: then the row is a smoke run only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CURVE_POINTS = 200


@dataclass(frozen=True)
class Row:
    name: str
    algorithm: str
    env: str
    timesteps: int
    reference: float | None  # the published return at this budget (None: none published)
    source: str
    env_note: str = ""  # where the reference used another env version or settings
    preprocessing: str = "none"


CLEANRL_MUJOCO = "CleanRL ppo_continuous_action.py, published benchmark (docs.cleanrl.dev, PPO), 1M steps"
ROWS: tuple[Row, ...] = (
    Row("ppo-cartpole", "ppo", "CartPole-v1", 500_000, 488.75,
        "CleanRL ppo.py, published benchmark (docs.cleanrl.dev, PPO: 488.75 +- 18.40), 500k steps"),
    Row("ppo-acrobot", "ppo", "Acrobot-v1", 500_000, -82.48,
        "CleanRL ppo.py, published benchmark (-82.48 +- 5.93), 500k steps"),
    Row("ppo-halfcheetah", "ppo", "HalfCheetah-v5", 1_000_000, 1442.0, f"{CLEANRL_MUJOCO}: 1,442 +- 46",
        "HalfCheetah-v4 in the reference, v5 here"),
    Row("ppo-hopper", "ppo", "Hopper-v5", 1_000_000, 2383.0, f"{CLEANRL_MUJOCO}: 2,383", "Hopper-v4 in the reference"),
    Row("ppo-hopper-v4", "ppo", "Hopper-v4", 1_000_000, 2383.0, f"{CLEANRL_MUJOCO}: 2,383",
        "the reference's own env version, to set beside CleanRL's script run here (bench/cleanrl_reference.py)"),
    Row("ppo-walker2d", "ppo", "Walker2d-v5", 1_000_000, 2288.0, f"{CLEANRL_MUJOCO}: 2,288",
        "Walker2d-v4 in the reference"),
    Row("sac-halfcheetah", "sac", "HalfCheetah-v5", 300_000, 6100.0,
        "RLlib's published halfcheetah-sac runs: about 6.1k at 300k steps",
        "RLlib's tuned example used HalfCheetah-v3 (mujoco-py); v5 here"),
    Row("sac-hopper", "sac", "Hopper-v5", 300_000, None,
        "none found at 300k steps (CleanRL and RL Zoo publish SAC on Hopper at 1M)"),
    Row("dqn-cartpole", "dqn", "CartPole-v1", 500_000, 488.69,
        "CleanRL dqn.py, published benchmark (488.69 +- 16.11), 500k steps"),
    Row("apex-cartpole", "apex-dqn", "CartPole-v1", 500_000, 488.69,
        "CleanRL dqn.py at 500k (488.69): no Ape-X figure on CartPole is published; the nearest DQN one"),
    Row("impala-cartpole", "impala", "CartPole-v1", 2_000_000, 450.0,
        "RLlib tuned_examples/impala/cartpole_impala.py: passes at 450 within 2M steps"),
    Row("appo-cartpole", "appo", "CartPole-v1", 2_000_000, 450.0,
        "RLlib tuned_examples/appo/cartpole_appo.py: passes at 450 within 2M steps"),
    Row("impala-pong", "impala", "ALE/Pong-v5", 5_000_000, 18.0,
        "RLlib tuned_examples/appo/pong-appo.yaml's note: IMPALA solves Pong at about 2x APPO's 2.5M steps",
        "RLlib: ALE/Pong-v5 with repeat_action_probability 0 and 32 workers; here v5's default 0.25", "atari"),
    Row("appo-pong", "appo", "ALE/Pong-v5", 5_000_000, 18.0,
        "RLlib tuned_examples/appo/pong-appo.yaml: 18 within 5M steps (2.5M in its note)",
        "RLlib: repeat_action_probability 0 and 32 workers x 8 envs; here v5's default 0.25", "atari"),
)


def manifest(row: Row, seed: int, timesteps: int, env_config: dict[str, Any] | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {"id": row.env}
    if env_config:
        env["config"] = env_config
    if row.preprocessing != "none":
        env["preprocessing"] = row.preprocessing
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
            "metadata": {"name": f"defaults-{row.name}-{seed}"},
            "spec": {"algorithm": row.algorithm, "env": env, "config": {"seed": seed},
                     "stop": {"timesteps": timesteps}}}


def train(row: Row, seed: int, timesteps: int, work: Path, env_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `kuberl train` run; its last results line's return, steps and time, and its defaults record. The
    checkout's root is on the path too, so a row's env may be a class of bench's own (bench/reward_norm_probe.py)."""
    doc = manifest(row, seed, timesteps, env_config)
    path = work / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "testing"), str(ROOT)])}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kuberl.cli", "train", "-f", str(path), "--storage",
                           f"file://{work / 'runs'}", "--quiet", "--fresh"], capture_output=True, text=True, env=env,
                          cwd=work)
    wall = time.perf_counter() - started
    run = work / "runs" / doc["metadata"]["name"]
    if proc.returncode != 0 or not (run / "results.jsonl").exists():
        return {"seed": seed, "ok": False, "wallSeconds": wall, "error": (proc.stderr or proc.stdout)[-2000:]}
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]
    last = lines[-1]
    curve = return_curve(lines)
    return {"seed": seed, "ok": True, "return": last.get("episodeReturnMean"), "timesteps": last.get("timesteps"),
            "best": max((r for _, r in curve), default=None), "wallSeconds": round(wall, 1),
            "defaults": lines[0].get("defaults"), "curve": curve,
            "defaultsLine": next((line for line in proc.stdout.splitlines() if line.startswith("using the ")), "")}


def return_curve(lines: list[dict[str, Any]], points: int = CURVE_POINTS) -> list[tuple[int, float]]:
    """(env steps, 100-episode return mean) along the run, thinned to about `points` and always with the last:
    a row that ends low after reaching its reference (a collapse) reads differently from one that never did."""
    scored = [(int(line["timesteps"]), float(line["episodeReturnMean"])) for line in lines
              if line.get("episodeReturnMean") is not None and line.get("timesteps") is not None]
    stride = max(1, len(scored) // points)
    return scored[::stride] + ([scored[-1]] if scored and (len(scored) - 1) % stride else [])


def verdict(row: Row, worst: float | None, timesteps: int) -> str:
    if row.reference is None or timesteps != row.timesteps:
        return "-"
    if worst is None:
        return "no"
    return "yes" if worst >= row.reference else "no"


def worst_seed(runs: list[dict[str, Any]]) -> float | None:
    """The lowest return of the runs, or None where any run failed or has none (a row is judged on all seeds)."""
    returns = [run["return"] for run in runs if run["ok"] and run["return"] is not None]
    return min(returns) if len(returns) == len(runs) else None


def row_result(row: Row, timesteps: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A row's --json entry: the row, its budget, its seeds' runs, the worst seed and the verdict, and the CPU it
    ran on (cpu_model, cpu_bf16, cpu_flags)."""
    from kuberl.trainer.cpu import cpu_summary

    worst = worst_seed(runs)
    return {**asdict(row), "budget": timesteps, "seeds": [run["seed"] for run in runs], "runs": runs,
            "worst": worst, "atOrAbove": verdict(row, worst, timesteps), **cpu_summary()}


def run_row(row: Row, seeds: list[int], timesteps: int, work: Path) -> dict[str, Any]:
    return row_result(row, timesteps, [train(row, seed, timesteps, work) for seed in seeds])


def merge_results(files: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The rows of several --json files (seeds run in separate processes, side by side), each row's runs joined
    in seed order and its worst seed and verdict taken again over all of them."""
    merged: dict[str, dict[str, Any]] = {}
    for results in files:
        for result in results:
            row = merged.setdefault(result["name"], {**result, "runs": []})
            if row["budget"] != result["budget"]:
                raise ValueError(f"{result['name']}: budgets {row['budget']} and {result['budget']} differ")
            row["runs"] += result["runs"]
    out = []
    for row in merged.values():
        row["runs"].sort(key=lambda run: run["seed"])
        row["seeds"] = [run["seed"] for run in row["runs"]]
        row["worst"] = worst_seed(row["runs"])
        fields = {key: row[key] for key in Row.__dataclass_fields__}
        row["atOrAbove"] = verdict(Row(**fields), row["worst"], row["budget"])
        out.append(row)
    return out


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def table(results: list[dict[str, Any]]) -> str:
    out = ["| row | env | steps | worst seed | seeds | reference | at or above | wall s (each seed) |",
           "|---|---|---:|---:|---|---:|---|---|"]
    for r in results:
        each = ", ".join(_fmt(run.get("return")) if run["ok"] else "failed" for run in r["runs"])
        walls = ", ".join(f"{run['wallSeconds']:.0f}" for run in r["runs"])
        out.append(f"| {r['name']} | {r['env']} | {r['budget']:,} | {_fmt(r['worst'])} | {each} | "
                   f"{_fmt(r['reference'])} | {r['atOrAbove']} | {walls} |")
    return "\n".join(out)


def plot_rows(results: list[dict[str, Any]], path: Path) -> None:
    """Each row's seeds' curves (the 100-episode return against env steps), its reference dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        for run in result["runs"]:
            if run.get("curve"):
                steps, returns = zip(*run["curve"], strict=True)
                ax.plot([n / 1e6 for n in steps], returns, label=f"seed {run['seed']}")
        if result["reference"] is not None:
            ax.axhline(result["reference"], color="grey", linestyle="--", linewidth=1, label="reference")
        ax.set_title(f"{result['name']}: defaults only")
        ax.set_xlabel("env steps (millions)")
        ax.set_ylabel("100-episode return mean")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--timesteps", type=int, default=None, help="override every row's budget (a smoke run)")
    parser.add_argument("--list", action="store_true", help="print the rows and their references")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--plot", type=Path, help="draw the rows' curves here (PNG)")
    parser.add_argument("--reuse", type=Path, help="a --json file of earlier runs: plot and tabulate it, train nothing")
    parser.add_argument("--merge", type=Path, nargs="+", help="--json files of one row's seeds run apart: "
                        "join them (into --json), tabulate and plot, train nothing")
    args = parser.parse_args(argv)
    wanted = {n for n in args.rows.split(",") if n}
    unknown = wanted - {row.name for row in ROWS}
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; --list shows them")
    if args.merge or args.reuse:
        results = (merge_results([json.loads(path.read_text()) for path in args.merge]) if args.merge
                   else json.loads(args.reuse.read_text()))
        results = [result for result in results if not wanted or result["name"] in wanted]
        if args.merge and args.json:
            args.json.write_text(json.dumps(results, indent=2))
        print(table(results))
        if args.plot:
            plot_rows(results, args.plot)
        return 0
    rows = [row for row in ROWS if not wanted or row.name in wanted]
    if args.list:
        for row in rows:
            print(f"{row.name}: {row.algorithm} {row.env} {row.timesteps:,} steps; reference "
                  f"{_fmt(row.reference)} ({row.source}){'; ' + row.env_note if row.env_note else ''}")
        return 0
    seeds = [int(s) for s in args.seeds.split(",") if s]
    results = []
    with tempfile.TemporaryDirectory(prefix="kuberl-defaults-") as tmp:
        for row in rows:
            result = run_row(row, seeds, args.timesteps or row.timesteps, Path(tmp))
            results.append(result)
            print(f"{row.name}: worst {_fmt(result['worst'])} ({result['atOrAbove']}); "
                  f"{result['runs'][0].get('defaultsLine', '')}", flush=True)
    print(table(results))
    print(json.dumps({"benchmark": "defaults", "loadavg": os.getloadavg()[0], "rows": results}))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.plot:
        plot_rows(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
