"""Sweeps on this machine (and on the stand-in cluster): the figures docs/sweeps.md asks for.

    .venv/bin/python bench/sweep.py                            # all three parts, the sizes in docs/benchmarks.md
    .venv/bin/python bench/sweep.py --smoke                    # a few thousand steps per trial: does it run
    .venv/bin/python bench/sweep.py --parts standin --json out.json   # one part (local, standin, pbt)

1. The issue's sweep: PPO's lr (log-uniform 1e-4..3e-3) and entropyCoeff (0 or 0.01) on CartPole-v1,
   TPE (seed 1), --trials trials (12), parallelism 2, median pruning every --interval steps after
   --min-steps, --timesteps per trial. Wall time, best value, trials pruned, and the CPU-seconds
   pruning saved (the pruned trials' remaining steps at the CPU-seconds per step of the trials that
   ran to the end, each trial's CPU time read from the kernel).
2. standin: the same sweep as an RLSweep on the stand-in (API emulator, the real operator,
   trainers as processes, moto's S3): wall time, best value, trials pruned, the trainers' CPU-seconds
   (the pod runner is a thread of this process: its trainer processes are this process's children),
   and the env steps pruning saved (from the pruned trials' status.timesteps) at the CPU-seconds per
   step of the trainers.
3. PBT against random search with the same budget on CartPole, where the learning rate's schedule
   matters at a short budget: a population of --population trained in rounds of --pbt-interval
   steps against --population independent random trials of the full budget; the final best return
   of each (CPU-seconds of each alongside).

The load average is taken before and after each part (the machine may be shared). It prints each
part's figures as it ends and, last, one JSON line with all of them and the CPU (cpu_model, cpu_bf16: native
bfloat16, cpu_flags).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.sweep.local import LocalSweep
from kuberl.sweep.summary import write_summary
from kuberl.trainer.cpu import cpu_summary

PARAMETERS = [
    {"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.003, "log": True},
    {"path": "config.entropyCoeff", "type": "categorical", "values": [0.0, 0.01]},
]


def template(timesteps: int, seed: int = 1) -> dict[str, Any]:
    return {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "config": {"seed": seed},
            "rollouts": {"workers": 0, "envsPerWorker": 8, "fragmentLength": 128},
            "stop": {"timesteps": timesteps}, "checkpoint": {"everyIterations": 10}}


def sweep_doc(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": name}, "spec": spec}


def run_local(doc: dict[str, Any], directory: Path) -> dict[str, Any]:
    sweep = validate_sweep_document(doc)
    started = time.monotonic()
    runner = LocalSweep(sweep, directory, out=io.StringIO(), fresh=True)
    ended = runner.run()
    summary = write_summary(directory, sweep.name, sweep.spec, runner.state, ended, runner.costs,
                            time.monotonic() - started)
    figures = {k: summary[k] for k in ("phase", "best", "trials", "pruned", "failed", "wallSeconds", "cpuSeconds",
                                       "pruning", "importance")}
    return {**figures, "finalValues": [t.value for t in runner.state.trials]}


def issue_sweep(args: argparse.Namespace) -> dict[str, Any]:
    return sweep_doc("cartpole-lr", template=template(args.timesteps), parameters=PARAMETERS,
                     objective={"metric": "episodeReturnMean", "goal": "maximize"},
                     search={"algorithm": "tpe", "seed": 1},
                     earlyStopping={"algorithm": "median", "interval": args.interval, "minSteps": args.min_steps,
                                    "startupTrials": 2},
                     maxTrials=args.trials, parallelism=2)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _pruning_saved(doc: dict[str, Any], trials: list[dict[str, Any]], cpu: float) -> dict[str, Any]:
    """Steps the pruned trials did not train, at the CPU-seconds per step of everything trained."""
    budget = doc["spec"]["template"]["stop"]["timesteps"]
    steps = sum(t["timesteps"] for t in trials)
    saved = sum(max(0, budget - t["timesteps"]) for t in trials if t["state"] == "Pruned")
    per_step = cpu / steps if steps else 0.0
    return {"stepsSaved": saved, "cpuSecondsSaved": round(saved * per_step, 1), "cpuSecondsPerStep": round(per_step, 6)}


def run_cluster(doc: dict[str, Any], work: Path) -> dict[str, Any]:
    """The sweep as an RLSweep on the stand-in cluster, until it ends."""
    from kubernetes import client as k8s

    from kuberl_testing.podrunner import api_client_from_kubeconfig
    from kuberl_testing.standin import StandInCluster

    cluster = StandInCluster(work).start()
    try:
        spec = doc["spec"]
        spec["template"] = {**spec["template"], "image": cluster.trainer_image,
                            "storage": {"uri": cluster.storage_uri, "endpoint": cluster.s3_endpoint,
                                        "secretRef": {"name": cluster.s3_secret}},
                            "head": {"cpu": "1", "memory": "2Gi"}}
        custom = k8s.CustomObjectsApi(api_client_from_kubeconfig(str(cluster.kubeconfig)))
        started, cpu_before = time.monotonic(), _children_cpu()
        custom.create_namespaced_custom_object("kuberl.io", "v1alpha1", cluster.namespace, "rlsweeps",
                                               {**doc, "metadata": {"name": doc["metadata"]["name"]}})
        while True:
            status = custom.get_namespaced_custom_object("kuberl.io", "v1alpha1", cluster.namespace, "rlsweeps",
                                                         doc["metadata"]["name"]).get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(2)
        wall = round(time.monotonic() - started, 1)
        runs = {i["metadata"]["name"]: i.get("status") or {} for i in custom.list_namespaced_custom_object(
            "kuberl.io", "v1alpha1", cluster.namespace, "rlexperiments")["items"]}
        time.sleep(5)  # the pruned trials' processes are stopped and reaped: their CPU time is counted
        cpu = round(_children_cpu() - cpu_before, 1)
        trials = [{"name": t["name"], "state": t["state"], "value": t.get("value"),
                   "timesteps": runs.get(t["name"], {}).get("timesteps") or 0} for t in status.get("trials", [])]
        return {"phase": status["phase"], "best": status.get("best"), "trials": len(trials),
                "pruned": status.get("trialsPruned"), "failed": status.get("trialsFailed"), "wallSeconds": wall,
                "cpuSeconds": cpu, "pruning": _pruning_saved(doc, trials, cpu), "trialSteps": trials}
    finally:
        cluster.stop()


def pbt_against_random(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    parameters = [{"path": "config.lr", "type": "float", "low": 0.00003, "high": 0.01, "log": True},
                  {"path": "config.entropyCoeff", "type": "float", "low": 0.0, "high": 0.02}]
    common = {"template": template(args.pbt_timesteps, args.pbt_seed), "parameters": parameters, "parallelism": 2,
              "objective": {"metric": "episodeReturnMean", "goal": "maximize"}}
    pbt = run_local(sweep_doc("pbt", **common, search={
        "algorithm": "pbt", "seed": args.pbt_seed, "pbt": {"populationSize": args.population,
                                               "perturbationInterval": args.pbt_interval}}), work / "pbt")
    random_ = run_local(sweep_doc("random", **common, search={"algorithm": "random", "seed": args.pbt_seed},
                                  maxTrials=args.population), work / "random")
    return {"pbt": pbt, "random": random_}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--timesteps", type=int, default=60_000)
    parser.add_argument("--interval", type=int, default=10_000)
    parser.add_argument("--min-steps", type=int, default=20_000)
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--pbt-timesteps", type=int, default=100_000)
    parser.add_argument("--pbt-interval", type=int, default=20_000)
    parser.add_argument("--pbt-seed", type=int, default=1, help="pbt part: the searches' seed and the runs' config.seed")
    parser.add_argument("--parts", default="local,standin,pbt",
                        help="which parts to run, comma-separated: local, standin, pbt (default: all)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the benchmark runs")
    parser.add_argument("--dir", help="where the sweeps go (default: a temporary directory)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.trials, args.timesteps, args.interval, args.min_steps = 3, 3072, 1024, 1024
        args.population, args.pbt_timesteps, args.pbt_interval = 2, 2048, 1024
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"local", "standin", "pbt"}
    if unknown:
        parser.error(f"--parts: unknown {', '.join(sorted(unknown))} (local, standin, pbt)")
    figures: dict[str, Any] = {"sizes": {k: getattr(args, k) for k in (
        "trials", "timesteps", "interval", "min_steps", "population", "pbt_timesteps", "pbt_interval",
        "pbt_seed")},
        "cpus": os.cpu_count(), **cpu_summary(), "loadAverage": {}}
    with tempfile.TemporaryDirectory(prefix="kuberl-bench-sweep-") as tmp:
        work = Path(args.dir) if args.dir else Path(tmp)
        for part, title, run in (
                ("local", "issue sweep, local", lambda: run_local(issue_sweep(args), work / "issue")),
                ("standin", "issue sweep, stand-in cluster", lambda: run_cluster(issue_sweep(args), work / "standin")),
                ("pbt", "pbt against random", lambda: pbt_against_random(args, work))):
            if part not in parts:
                continue
            before = _load()
            figures[part] = run()
            figures["loadAverage"][part] = {"before": before, "after": _load()}
            print(f"{title}:", json.dumps(figures[part]), flush=True)
        for name, result in (figures.get("pbt") or {}).items():
            best = result["best"]["value"] if result["best"] else None
            print(f"{name}: best episodeReturnMean {best}, cpu-seconds {result['cpuSeconds']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    print(yaml.safe_dump(figures, sort_keys=False))
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
