"""A finished sweep in a file: summary.json, summary.png (objective against trial, parameter importance)
and the one JSON line `kuberl sweep` ends with."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kuberl.api.sweep_types import RLSweepSpec, TrialState
from kuberl.sweep import search
from kuberl.sweep.search import Outcome, SweepState


def importance(spec: RLSweepSpec, state: SweepState) -> dict[str, float] | None:
    """Optuna's parameter importance (PED-ANOVA) over the succeeded trials; None when it cannot say
    (fewer than two succeeded trials, one parameter, or values that do not differ)."""
    done = [t for t in state.trials if t.state == TrialState.SUCCEEDED and t.value is not None]
    if len(done) < 2 or len(spec.parameters) < 2 or spec.search.algorithm == "pbt":
        return None
    import optuna

    study = search.build_study(spec, state)
    try:
        ranked = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError, ZeroDivisionError):
        return None
    return {k: round(float(v), 4) for k, v in ranked.items() if math.isfinite(v)} or None


def pruning_savings(spec: RLSweepSpec, state: SweepState, costs: dict[int, Any]) -> dict[str, float] | None:
    """Env steps and CPU-seconds that pruned trials did not spend: their remaining steps to
    template.stop.timesteps at the CPU-seconds per step the trials that ran to the end spent."""
    budget = spec.template.stop.timesteps
    pruned = [t for t in state.trials if t.state == TrialState.PRUNED and t.number in costs]
    full = [costs[t.number] for t in state.trials if t.state == TrialState.SUCCEEDED and t.number in costs
            and costs[t.number].timesteps > 0]
    if budget is None or not pruned or not full:
        return None
    per_step = sum(c.cpu_seconds for c in full) / sum(c.timesteps for c in full)
    steps = sum(max(budget - costs[t.number].timesteps, 0) for t in pruned)
    return {"stepsSaved": steps, "cpuSecondsSaved": round(steps * per_step, 1),
            "cpuSecondsPerStep": round(per_step, 6)}


def result_line(state: SweepState, spec: RLSweepSpec) -> dict[str, Any]:
    top = search.best(spec, state)
    counts = state.counts()
    return {
        "best": None if top is None else {"trial": top.name, "params": top.params, "value": top.value},
        "trials": len(state.trials),
        "pruned": counts[TrialState.PRUNED],
        "failed": counts[TrialState.FAILED],
    }


def write_summary(directory: Path, name: str, spec: RLSweepSpec, state: SweepState, ended: Outcome,
                  costs: dict[int, Any], wall_seconds: float) -> dict[str, Any]:
    summary = {
        "sweep": name,
        "phase": ended.phase.value,
        "reason": ended.reason,
        "message": ended.message,
        "objective": spec.objective.model_dump(by_alias=True, exclude_none=True),
        "search": spec.search.algorithm,
        **result_line(state, spec),
        "wallSeconds": round(wall_seconds, 1),
        "cpuSeconds": round(sum(c.cpu_seconds for c in costs.values()), 1),
        "pruning": pruning_savings(spec, state, costs),
        "importance": importance(spec, state),
        "trialRecords": [
            {**t.model_dump(by_alias=True, exclude_none=True, exclude={"pruner_state"}),
             **({"timesteps": costs[t.number].timesteps, "cpuSeconds": round(costs[t.number].cpu_seconds, 1)}
                if t.number in costs else {})}
            for t in state.trials
        ],
    }
    (directory / "summary.json").write_text(json.dumps(summary, indent=1))
    _plot(directory / "summary.png", name, spec, state, summary["importance"])
    return summary


def _plot(path: Path, name: str, spec: RLSweepSpec, state: SweepState, ranked: dict[str, float] | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if ranked else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
    ax = axes[0][0]
    colours = {TrialState.SUCCEEDED: "tab:blue", TrialState.PRUNED: "tab:orange", TrialState.FAILED: "tab:red"}
    for trial_state, colour in colours.items():
        points = [(t.number, t.value) for t in state.trials if t.state == trial_state and t.value is not None]
        if points:
            ax.scatter(*zip(*points, strict=True), color=colour, label=trial_state.value.lower())
    best_so_far, line = None, []
    for t in state.trials:
        if t.state == TrialState.SUCCEEDED and t.value is not None and (
                best_so_far is None or search.better(spec, t.value, best_so_far)):
            best_so_far = t.value
        line.append(best_so_far)
    if any(v is not None for v in line):
        ax.step(range(len(line)), [float("nan") if v is None else v for v in line], where="post", color="black",
                label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(spec.objective.metric)
    ax.set_title(f"{name}: {spec.search.algorithm}")
    if ax.get_legend_handles_labels()[1]:  # no trial has a value: nothing to label (matplotlib would warn)
        ax.legend()
    if ranked:
        bars = axes[0][1]
        bars.barh(list(ranked)[::-1], list(ranked.values())[::-1])
        bars.set_xlabel("importance (Optuna PED-ANOVA)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
