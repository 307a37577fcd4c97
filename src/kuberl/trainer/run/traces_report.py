"""`kuberl traces URI`: a run's episodes and results, summarised, with a learning-curve PNG."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from kuberl.trainer.evaluation.run_evaluations import VIDEOS
from kuberl.trainer.iteration_result import IterationResult, ResultLine, line_from_json
from kuberl.trainer.storage import open_store
from kuberl.trainer.storage.base import ObjectStore, StorageError
from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.run import RunStorage
from kuberl.trainer.storage.traces import read_traces

TIME_WINDOWS = 5
PNG_NAME = "learning-curve.png"


def report(uri: str, endpoint: str | None = None, png_path: str | Path | None = None) -> str:
    """Summarise the run at `uri` (local path, file:// or s3://) and write its learning curve.

    The PNG goes to `png_path`, else into the run directory for a local run, else to
    ./learning-curve-NAME.png. Raises StorageError when the URI holds no run.
    """
    store = open_store(uri, endpoint=endpoint)
    results = [line_from_json(line) for line in RunStorage(store).read_results()]
    episodes = list(read_traces(store))
    if not results and not episodes:
        raise StorageError(f"{store.uri}: no results.jsonl and no traces/ here; is this a run directory?")
    png = Path(png_path) if png_path else default_png_path(store)
    plot_learning_curve(results, episodes, png, title=store.uri)
    return (summarize(results, episodes, run_uri=store.uri) + evaluations_text(results)
            + videos_text(store) + f"\nlearning curve: {png}")


def evaluations_text(results: list[ResultLine]) -> str:
    """One line per evaluation in results.jsonl (the policy of which iteration, its return)."""
    found = [r.evaluation for r in results if r.evaluation is not None]
    if not found:
        return ""
    lines = [f"\nevaluations: {len(found)}"]
    lines += [f"  iteration {e.iteration}: return mean {_fmt(e.return_mean, '.2f')} "
              f"(std {_fmt(e.return_std, '.2f')}, {e.episodes} episodes)" for e in found]
    return "\n".join(lines)


def iterations(results: list[ResultLine]) -> list[IterationResult]:
    """The iterations' lines, without the lines of evaluations that finished after the last one."""
    return [r for r in results if isinstance(r, IterationResult)]


def videos_text(store: ObjectStore) -> str:
    """The run's evaluation videos (videos/*.mp4), by URI."""
    videos = [key for key in store.list(f"{VIDEOS}/") if key.endswith(".mp4")]
    if not videos:
        return ""
    return "\n".join([f"\nvideos: {len(videos)}", *(f"  {store.url(key)}" for key in videos)])


def default_png_path(store: ObjectStore) -> Path:
    if isinstance(store, LocalStore):
        return store.root / PNG_NAME
    name = store.uri.rstrip("/").rsplit("/", 1)[-1]
    return Path.cwd() / f"learning-curve-{name}.png"


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def return_windows(episodes: list[dict[str, Any]], windows: int = TIME_WINDOWS) -> list[dict[str, Any]]:
    """Episodes split into equal spans of wall time (by endTime): count and return percentiles of each."""
    timed = [e for e in episodes if e.get("endTime") is not None and e.get("return") is not None]
    if not timed:
        return []
    ends = np.array([float(e["endTime"]) for e in timed])
    returns = np.array([float(e["return"]) for e in timed])
    start, stop = float(ends.min()), float(ends.max())
    edges = np.linspace(start, stop, windows + 1) if stop > start else np.array([start, stop])
    # Bucket i holds ends in [edges[i], edges[i+1]); the last one includes its right edge.
    index = np.clip(np.searchsorted(edges, ends, side="right") - 1, 0, len(edges) - 2)
    rows = []
    for i in range(len(edges) - 1):
        chosen = returns[index == i]
        if chosen.size == 0:
            continue
        p10, p50, p90 = np.percentile(chosen, [10, 50, 90])
        rows.append({"from": edges[i] - start, "to": edges[i + 1] - start, "episodes": int(chosen.size),
                     "p10": float(p10), "p50": float(p50), "p90": float(p90), "mean": float(chosen.mean())})
    return rows


def worker_throughput(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per worker: episodes, env steps, and steps per second over the span its episodes cover."""
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in episodes:
        by_worker[str(e.get("worker", "?"))].append(e)
    rows = []
    for worker, items in sorted(by_worker.items()):
        steps = sum(int(e.get("length") or 0) for e in items)
        starts = [float(e["startTime"]) for e in items if e.get("startTime") is not None]
        ends = [float(e["endTime"]) for e in items if e.get("endTime") is not None]
        span = (max(ends) - min(starts)) if starts and ends else 0.0
        rows.append({"worker": worker, "episodes": len(items), "steps": steps, "seconds": span,
                     "stepsPerSecond": steps / span if span > 0 else None})
    return rows


def summarize(results: list[ResultLine], episodes: list[dict[str, Any]], *, run_uri: str = "") -> str:
    """The text `kuberl traces` prints."""
    lines = [f"run {run_uri}" if run_uri else "run"]
    trained = iterations(results)
    if trained:
        last = trained[-1]
        means = [r.episode_return_mean for r in trained if r.episode_return_mean is not None]
        lines.append(
            f"results: {len(trained)} iterations, {last.timesteps:,} env steps, "
            f"{_fmt(last.time_seconds)} s; return mean last {_fmt(last.episode_return_mean)}, "
            f"best {_fmt(max(means) if means else None)}"
        )
    else:
        lines.append("results: none (no results.jsonl)")
    if not episodes:
        lines.append("episodes: none (traces disabled or not flushed yet)")
        return "\n".join(lines)
    returns = np.array([float(e["return"]) for e in episodes if e.get("return") is not None])
    lines.append(
        f"episodes: {len(episodes):,} from {len({str(e.get('worker')) for e in episodes})} workers; return "
        + (f"mean {returns.mean():.1f}, min {returns.min():.1f}, max {returns.max():.1f}" if returns.size else "n/a")
    )
    windows = return_windows(episodes)
    if windows:
        lines.append("return percentiles over time:")
        lines.append(f"  {'seconds':>15}  {'episodes':>8}  {'p10':>8}  {'p50':>8}  {'p90':>8}")
        for w in windows:
            span = f"{w['from']:.0f}-{w['to']:.0f}"
            lines.append(f"  {span:>15}  {w['episodes']:>8}  {w['p10']:>8.1f}  {w['p50']:>8.1f}  {w['p90']:>8.1f}")
    lines.append("per-worker throughput:")
    lines.append(f"  {'worker':>10}  {'episodes':>8}  {'env steps':>10}  {'steps/s':>9}")
    for w in worker_throughput(episodes):
        lines.append(f"  {w['worker']:>10}  {w['episodes']:>8}  {w['steps']:>10}  {_fmt(w['stepsPerSecond'], '9.0f'):>9}")
    return "\n".join(lines)


def _curve_from_episodes(episodes: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cumulative env steps, seconds since the first episode, 100-episode mean return), in end order."""
    timed = sorted((e for e in episodes if e.get("return") is not None), key=lambda e: e.get("endTime") or 0)
    returns = np.array([float(e["return"]) for e in timed])
    steps = np.cumsum([int(e.get("length") or 0) for e in timed])
    ends = np.array([float(e.get("endTime") or 0) for e in timed])
    seconds = ends - ends.min() if ends.size else ends
    window = np.convolve(returns, np.ones(100), "full")[: returns.size]
    counts = np.minimum(np.arange(1, returns.size + 1), 100)
    return steps, seconds, window / counts


def plot_learning_curve(results: list[ResultLine], episodes: list[dict[str, Any]], path: Path,
                        title: str = "") -> None:
    """Return against env steps and against wall time, from results.jsonl (or the traces without it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    rows = [r for r in iterations(results) if r.episode_return_mean is not None]
    if rows:
        steps = np.array([r.timesteps for r in rows])
        seconds = np.array([r.time_seconds for r in rows])
        means = np.array([r.episode_return_mean for r in rows], dtype=float)
        by_steps.plot(steps, means, label="return mean (100 episodes)")
        by_time.plot(seconds, means, label="return mean (100 episodes)")
    elif episodes:
        steps, seconds, means = _curve_from_episodes(episodes)
        by_steps.plot(steps, means, label="return mean (100 episodes, traces)")
        by_time.plot(seconds, means, label="return mean (100 episodes, traces)")
    if episodes and rows:
        _steps, seconds, _means = _curve_from_episodes(episodes)
        returns = [float(e["return"]) for e in sorted(episodes, key=lambda e: e.get("endTime") or 0)
                   if e.get("return") is not None]
        by_time.scatter(seconds, returns, s=2, alpha=0.25, color="grey", label="episodes")
    by_steps.set_xlabel("env steps")
    by_time.set_xlabel("wall time (s)")
    for ax in (by_steps, by_time):
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
