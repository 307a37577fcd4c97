"""Pong from pixels to a 100-game mean of 18 on this machine's CPUs, beside RLlib 2.60 APPO.

    PYTHONPATH=src:testing python bench/pong.py --seeds 1,2 --cap 7200 --out bench-pong           # kuberl
    make bench-deps && PYTHONPATH=src:testing python bench/pong.py --seeds 1,2 --cap 7200 --rllib  # and RLlib

kuberl trains examples/pong-ppo-cpu.yaml (PPO in the learner's process, ALE's vector env on every core, the
learner in float32 on the CPU, learner.bf16: auto) with `config.seed` set to each seed, one seed after the other,
until the 100-game mean of the game score reaches 18 (at least 100 games finished) or --cap seconds of wall time pass
(the build included). With --rllib, RLlib APPO with its own pong_appo.py settings (bench/atari.py's
RLLIB_APPO: 2 env runners, a CPU learner) then trains each seed alone on the same machine, with the same
sticky-action setting and the same cap; its clock starts when its algorithm is built. Nothing else should run
meanwhile: the two never share the cores, each has both of them in turn.

Writes pong-<system>-seed<N>.json (the summary and every iteration's row) and pong.png (score against wall
minutes and env steps, every run); prints one JSON line per run and, last, one with the worst kuberl seed's
minutes_to_18 (null if a seed did not reach it), env_steps_to_18, final_score, sticky_actions and the CPU
(cpu_model, cpu_bf16: native bfloat16, cpu_flags), and RLlib's score at the minute the slowest kuberl seed
reached 18. SIGINT or SIGTERM (`kill PID`) ends the kuberl or peer run under way, keeps its curve, and starts no
other.

With --peer, a peer alone instead of kuberl (bench/pong_peers.py: each its own program from its own venv, made by
`make bench-deps-pong-peers`), on each of --seeds in turn, with the same goal, cap and sticky actions 0.0:

    PYTHONPATH=src .venv/bin/python bench/pong.py --peer cleanrl --seeds 1 --cap 7200 --json pong-cleanrl.json
    PYTHONPATH=src .venv/bin/python bench/pong.py --peer cleanrl-envpool --seeds 1
    PYTHONPATH=src .venv/bin/python bench/pong.py --peer rllib-ppo --seeds 1
    PYTHONPATH=src .venv/bin/python bench/pong.py --peer sample-factory --seeds 1

--steps caps each run's env steps (a smoke run). Each run's line has the peer, its version or commit, env steps/s
(launch included), why it stopped, and its curve ([minutes, env steps, 100-game mean], a point every 30 s); the last
line has the worst seed's figures, its curve and the CPU. --json writes every line's object to a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script or with -m: its sibling modules
from atari import RLLIB_APPO  # noqa: E402
from pong_peers import PEERS, run_peer, thin  # noqa: E402
from rllib_runner import DEFAULT_PYTHON, run_rllib  # noqa: E402
from score_curve import plot_score, scored_points, stop_requests, summary, train_to_score, worst_seed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pong-ppo-cpu.yaml"
GOAL = 18.0


def machine() -> dict[str, Any]:
    from kuberl.trainer.cpu import cpu_summary

    return {"cpuCores": os.cpu_count(), **cpu_summary(), "python": platform.python_version(),
            "loadAverageAtStart": round(os.getloadavg()[0], 2)}


def kuberl_seed(seed: int, cap: float, overrides: list[str], stop: threading.Event) -> dict[str, Any]:
    from kuberl.trainer.algorithms.config import AlgorithmConfig

    config = AlgorithmConfig.from_manifest(EXAMPLE, [f"config.seed={seed}", *overrides])
    sticky = config.document["spec"]["env"].get("config", {}).get("repeat_action_probability", 0.25)
    load = machine()
    run = train_to_score(config, GOAL, cap, stop=stop)
    curve = scored_points(run.rows)
    result = {"system": "kuberl", "seed": seed, **summary(run, GOAL), "sticky_actions": sticky,
              "cap_seconds": cap, "overrides": overrides, **load, "loadAverageAtEnd": round(os.getloadavg()[0], 2),
              "curve": thin([(*point, None) for point in curve])}
    return {"summary": result, "curve": curve, "rows": run.rows}


def peer_seed(peer: str, seed: int, cap: float, max_steps: int | None, stop: threading.Event) -> dict[str, Any]:
    load = machine()
    run = run_peer(peer, seed, GOAL, cap, max_steps, stop=stop)
    result = {**run["summary"], **load, "loadAverageAtEnd": round(os.getloadavg()[0], 2)}
    return {"summary": result, "curve": [point[:3] for point in run["points"]]}


def rllib_seed(seed: int, cap: float, sticky: float, python: Path) -> dict[str, Any]:
    spec = dataclasses.replace(RLLIB_APPO, seed=seed, sticky=sticky, target=GOAL, cap=cap)
    load = machine()
    run = run_rllib(python, spec, deadline_seconds=cap + 900, keep_rows=True)
    run.pop("curve", None)
    rows = run.pop("rows", [])
    curve = [(r["timeSeconds"], r["timesteps"], r["episodeReturnMean"]) for r in rows
             if r.get("episodeReturnMean") is not None]
    result = {"system": "rllib-appo", "seed": seed, "sticky_actions": sticky, "cap_seconds": cap, **load,
              "loadAverageAtEnd": round(os.getloadavg()[0], 2), **run}
    return {"summary": result, "curve": curve, "rows": rows}


def curve_of(run: dict[str, Any]) -> list[tuple[float, int | None, float]]:
    """The run's (seconds, env steps, score) points; bench/results/ keeps kuberl's curves as trimmed rows."""
    return [scored_points([p])[0] if isinstance(p, dict) else tuple(p) for p in run["curve"]
            if not isinstance(p, dict) or p.get("score100") is not None]


def score_at(curve: list[tuple[float, int | None, float]], seconds: float) -> float | None:
    """The last score reported at or before `seconds`."""
    before = [score for s, _, score in curve if s <= seconds]
    return before[-1] if before else None


def worst_line(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The last line: the worst seed's figures (minutes_to_18 null unless every seed reached 18) and the CPU."""
    reached: list[float | None] = [s.get("minutes_to_18") for s in summaries]
    worst = worst_seed(summaries, GOAL)
    return {"system": worst["system"], "worst_seed": worst["seed"],
            "minutes_to_18": None if None in reached else max(m for m in reached if m is not None),
            "env_steps_to_18": worst.get("env_steps_to_18"), "final_score": worst.get("final_score"),
            "sticky_actions": worst["sticky_actions"], "seeds": [s["seed"] for s in summaries],
            **{key: worst.get(key) for key in ("peer_version", "env_steps_per_second", "stopped", "error")
               if key in worst},
            **{key: worst.get(key) for key in ("cpu_model", "cpu_bf16", "cpu_flags")}, "curve": worst.get("curve")}


def run_peers(args: argparse.Namespace, seeds: list[int], stop: threading.Event) -> list[dict[str, Any]]:
    """--peer: the peer alone on each seed until one is interrupted; its lines, the last one the worst seed's."""
    lines, runs = [], {}
    for seed in seeds:
        if stop.is_set():
            break
        run = peer_seed(args.peer, seed, args.cap, args.steps, stop)
        (args.out / f"pong-{args.peer}-seed{seed}.json").write_text(json.dumps(run, indent=0))
        runs[f"{args.peer} seed {seed}"] = run
        lines.append(run["summary"])
        print(json.dumps(run["summary"]), flush=True)
    if not lines:
        return []
    plot_score({name: [tuple(p) for p in run["curve"]] for name, run in runs.items()}, GOAL,
               f"Pong from pixels (sticky actions 0.0), {args.peer}, {os.cpu_count()} cores, no GPU",
               args.out / f"pong-{args.peer}.png")
    return [*lines, worst_line(lines)]


def kuberl_runs(args: argparse.Namespace, seeds: list[int], stop: threading.Event) -> dict[str, dict[str, Any]]:
    """kuberl on each seed in turn (or its run already in --out), until one is interrupted."""
    runs: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        path = args.out / f"pong-kuberl-seed{seed}.json"
        if args.only_rllib or (args.reuse and path.exists()):
            runs[f"kuberl PPO seed {seed}"] = json.loads(path.read_text())
            continue
        if stop.is_set():
            break
        run = kuberl_seed(seed, args.cap, args.set, stop)
        path.write_text(json.dumps(run, indent=0))
        runs[f"kuberl PPO seed {seed}"] = run
        print(json.dumps(run["summary"]), flush=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--cap", type=float, default=7200.0, help="seconds of wall time per run")
    parser.add_argument("--out", type=Path, default=Path("bench-pong"))
    parser.add_argument("--rllib", action="store_true", help="also RLlib 2.60 APPO, after kuberl")
    parser.add_argument("--only-rllib", action="store_true", help="RLlib alone (kuberl's runs already in --out)")
    parser.add_argument("--rllib-seeds", help="RLlib's seeds, if not --seeds (one run of each per session)")
    parser.add_argument("--reuse", action="store_true", help="runs already in --out are read, not run again")
    parser.add_argument("--rllib-python", type=Path, default=DEFAULT_PYTHON)
    parser.add_argument("--set", action="append", default=[], help="a manifest override, as kuberl train --set")
    parser.add_argument("--peer", choices=PEERS, help="a peer alone instead of kuberl (bench/pong_peers.py)")
    parser.add_argument("--steps", type=int, help="--peer: stop each run at this many env steps (a smoke run)")
    parser.add_argument("--json", type=Path, help="--peer: every line's object, in a file")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    # SIGINT or SIGTERM ends the kuberl or peer run under way (it keeps its curve) and starts no other.
    with stop_requests() as stop:
        if args.peer:
            lines = run_peers(args, seeds, stop)
            if not lines:
                return 1
            if args.json:
                args.json.write_text(json.dumps(lines, indent=1))
            print(json.dumps(lines[-1]), flush=True)
            return 0 if all("error" not in line for line in lines) else 1
        runs = kuberl_runs(args, seeds, stop)
    kuberl = [run["summary"] for run in runs.values()]
    if not kuberl:
        return 1
    sticky = kuberl[0]["sticky_actions"]
    if (args.rllib or args.only_rllib) and not stop.is_set():  # RLlib stops at its own cap
        for seed in [int(s) for s in args.rllib_seeds.split(",")] if args.rllib_seeds else seeds:
            path = args.out / f"pong-rllib-seed{seed}.json"
            if args.reuse and path.exists():
                runs[f"RLlib APPO seed {seed}"] = json.loads(path.read_text())
                continue
            run = rllib_seed(seed, args.cap, sticky, args.rllib_python)
            path.write_text(json.dumps(run, indent=0))
            runs[f"RLlib APPO seed {seed}"] = run
            print(json.dumps(run["summary"]), flush=True)
    plot_score({name: curve_of(run) for name, run in runs.items()}, GOAL,
               f"ALE/Pong-v5 from pixels (sticky actions {sticky}), {os.cpu_count()} cores, no GPU",
               args.out / "pong.png")
    reached = [s["minutes_to_18"] for s in kuberl]
    worst = worst_seed(kuberl, GOAL)
    final = {"worst_seed": worst["seed"], "minutes_to_18": None if None in reached else max(reached),
             "env_steps_to_18": worst["env_steps_to_18"], "final_score": worst["final_score"],
             "sticky_actions": sticky, "seeds": [line["seed"] for line in kuberl],
             **({"stopped": "interrupted"} if stop.is_set() else {}),
             **{key: worst.get(key) for key in ("cpu_model", "cpu_bf16", "cpu_flags")}}
    if None not in reached:
        final["rllib_score_at_that_minute"] = {name: score_at(curve_of(run), max(reached) * 60)
                                               for name, run in runs.items() if name.startswith("RLlib")}
    print(json.dumps(final), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
