"""Train one kuberl config until its 100-episode mean reaches a score or a wall-time cap, keeping the curve.

`train_to_score` is the loop bench/gpu.py (Pong on one GPU) and bench/pong.py (Pong on this machine's CPUs)
share: every `algo.train()` result becomes one row (wall seconds since the build started, env steps, episodes,
the 100-episode mean, where the iteration's time went, the learner's stats, and what `extra_row` adds); the run
ends at the first row with at least 100 episodes and a mean >= `goal`, past `cap_seconds`, or at the end of the
iteration during which SIGINT or SIGTERM came (Ctrl-C keeps the curve so far: its summary says "interrupted"). `summary` gives
the figures every such bench prints (minutes_to_<goal> and env steps to it, null where not reached), and
`plot_score` draws the score against wall time and against env steps.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEARNER_KEYS = ("policyLoss", "valueLoss", "entropy", "approxKl", "clipFraction", "lr", "updates", "updateSeconds")


@dataclass
class ScoreRun:
    rows: list[dict[str, Any]]
    reached: dict[str, Any] | None  # the first row at the goal
    build_seconds: float
    interrupted: bool = False  # stopped by SIGINT or SIGTERM before the goal or the cap


def train_to_score(config: Any, goal: float, cap_seconds: float, *, print_every: int = 20,
                   extra_row: Callable[[float], dict[str, Any]] | None = None,
                   stop: threading.Event | None = None) -> ScoreRun:
    """Build `config` (a kuberl AlgorithmConfig) and train it to `goal` or `cap_seconds` of wall time; a signal
    during the run also sets `stop`, the caller's event that ends a whole series of runs."""
    started = time.monotonic()
    algo = config.build()
    built = time.monotonic() - started
    rows: list[dict[str, Any]] = []
    reached = None
    # Installed after the build, over whatever handler the trainer set, and put back after the loop.
    with stop_requests(stop) as interrupted:
        try:
            while True:
                tick = time.monotonic()
                result = algo.train()
                now = time.monotonic()
                mean, episodes = result["episodeReturnMean"], result["episodes"]
                learner = result.get("learner", {})
                row = {"seconds": now - started, "timesteps": result["timesteps"], "episodes": episodes,
                       "score100": mean, "iterationSeconds": now - tick,
                       "sampleSeconds": result["sampler"].get("sampleSeconds"),
                       "envSeconds": result["sampler"].get("envSeconds"),
                       **{k: learner.get(k) for k in LEARNER_KEYS}, **(extra_row(tick) if extra_row else {})}
                rows.append(row)
                if len(rows) % print_every == 1:
                    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}),
                          flush=True)
                if mean is not None and episodes >= 100 and mean >= goal:
                    reached = row
                    break
                if now - started > cap_seconds or interrupted.is_set():
                    break
        finally:
            algo.stop()
    return ScoreRun(rows, reached, built, interrupted=interrupted.is_set() and reached is None)


@contextlib.contextmanager
def stop_requests(requested: threading.Event | None = None,
                  on_stop: Callable[[], None] | None = None) -> Iterator[threading.Event]:
    """While inside: SIGINT and SIGTERM set `requested` (a new event if none is given; a caller's event ends a
    series of runs) and call `on_stop`, instead of ending the process, so a long bench keeps what it measured and
    runs nothing after; the handlers before come back on the way out."""
    requested = requested if requested is not None else threading.Event()

    def request(*_: Any) -> None:
        requested.set()
        if on_stop is not None:
            on_stop()

    previous = {sig: signal.signal(sig, request) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def summary(run: ScoreRun, goal: float) -> dict[str, Any]:
    """minutes_to_<goal>, env_steps_to_<goal> (null if not reached), the final score and the run's rate."""
    last = run.rows[-1]
    tag = f"{goal:g}"
    return {
        f"minutes_to_{tag}": None if run.reached is None else round(run.reached["seconds"] / 60, 2),
        f"env_steps_to_{tag}": None if run.reached is None else run.reached["timesteps"],
        "final_score": last["score100"], "final_timesteps": last["timesteps"], "episodes": last["episodes"],
        "wall_seconds": round(last["seconds"], 1), "build_seconds": round(run.build_seconds, 1),
        "env_steps_per_second": round(last["timesteps"] / last["seconds"], 1),
        **({"stopped": "interrupted"} if run.interrupted else {}),
    }


def worst_seed(summaries: list[dict[str, Any]], goal: float) -> dict[str, Any]:
    """The seed that counts: any that did not reach the goal before those that did, the lowest final score among
    them (a run stopped before it had a score lowest of all), else the slowest to the goal."""
    minutes = f"minutes_to_{goal:g}"

    def badness(seed: dict[str, Any]) -> tuple[bool, float, float]:
        score = seed.get("final_score")
        return seed.get(minutes) is None, seed.get(minutes) or 0.0, -score if score is not None else float("inf")

    return max(summaries, key=badness)


def plot_score(curves: dict[str, list[tuple[float, int | None, float]]], goal: float | None, title: str,
               path: Path, *, score_label: str = "100-game mean score",
               steps_label: str = "env steps (millions; 4 frames each)",
               styles: dict[str, dict[str, Any]] | None = None, wall_marks: tuple[float, ...] = (),
               legend_fontsize: float = 8, legend_loc: str = "best", size: tuple[float, float] = (11, 4), dpi: int = 110) -> None:
    """`curves`: name -> [(wall seconds, env steps or None, score)]; the score against minutes and env steps,
    with the goal (if any) as a dashed line. `styles`: name -> matplotlib line keywords for that curve;
    `wall_marks`: minutes marked on the wall-time axis (a time goal). With more than 6 curves the legend is
    drawn once, on the env-steps axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=size)
    for name, points in curves.items():
        style = (styles or {}).get(name, {})
        axes[0].plot([s / 60 for s, _, v in points], [v for _, _, v in points], label=name, **style)
        stepped = [(n, v) for _, n, v in points if n is not None]
        if stepped:
            axes[1].plot([n / 1e6 for n, _ in stepped], [v for _, v in stepped], label=name, **style)
    for minutes in wall_marks:
        axes[0].axvline(minutes, color="tab:green", linestyle=":", alpha=0.5)
    for ax, label in ((axes[0], "wall minutes (build included)"), (axes[1], steps_label)):
        if goal is not None:
            ax.axhline(goal, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel(label)
        ax.set_ylabel(score_label)
        ax.grid(alpha=0.3)
        if len(curves) <= 6 or ax is axes[1]:
            ax.legend(fontsize=legend_fontsize, loc=legend_loc)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def scored_points(rows: list[dict[str, Any]]) -> list[tuple[float, int | None, float]]:
    return [(r["seconds"], r["timesteps"], r["score100"]) for r in rows if r["score100"] is not None]
