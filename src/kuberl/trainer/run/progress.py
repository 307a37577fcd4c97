"""What `kuberl train` prints while it trains: on a terminal a progress bar towards the stop criteria
(run/progress_bar.py), elsewhere (logs, pods) a progress line per result, at most one a second; and how
the run ended."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, TextIO

from kuberl.trainer.run.observer import RunObserver

if TYPE_CHECKING:
    from kuberl.api.types import StopSpec
    from kuberl.trainer.iteration_result import IterationResult
    from kuberl.trainer.run.progress_bar import StopBar
    from kuberl.trainer.run.summary import Summary
    from kuberl.trainer.storage.base import CheckpointInfo

LOG_LINE_SECONDS = 1.0


def progress_line(result: IterationResult) -> str:
    ret = result.episode_return_mean
    ret_text = f"{ret:8.1f}" if ret is not None and math.isfinite(ret) else "       -"
    evaluated = result.evaluation.return_mean if result.evaluation is not None else None
    return (
        f"iter {result.iteration:5d} | steps {result.timesteps:>11,} | "
        f"{result.env_steps_per_second:>9,.0f} steps/s | return {ret_text} | "
        f"{result.time_seconds:7.1f}s"
        + (f" | eval {evaluated:.1f}" if evaluated is not None else "")
        + policy_returns(result)
    )


def policy_returns(result: IterationResult, most: int = 4) -> str:
    """A multi-agent run's per-policy return means (its `return` is the team's), the first `most` of them."""
    shown = [f"{name} {policy.episode_return_mean:.1f}" for name, policy in list(result.policies.items())[:most]
             if policy.episode_return_mean is not None]
    return f" | {', '.join(shown)}" if shown else ""


class Progress(RunObserver):
    def __init__(self, out: TextIO, *, quiet: bool, in_cluster: bool, stop: StopSpec) -> None:
        self.out = out
        self.quiet = quiet
        self.in_cluster = in_cluster
        self.bar: StopBar | None = None
        if out.isatty() and not quiet:
            from kuberl.trainer.run.progress_bar import StopBar

            self.bar = StopBar(out, stop)
        self.seconds = 0.0  # the last result's timeSeconds
        self._last_line = 0.0

    def on_iteration_end(self, result: IterationResult, *, stopping: bool) -> None:
        self.seconds = result.time_seconds
        if self.bar is not None:
            self.bar.update(result, final=stopping, extra=policy_returns(result))
        elif not self.quiet and (stopping or time.monotonic() - self._last_line >= LOG_LINE_SECONDS):
            print(progress_line(result), file=self.out, flush=True)  # logs get a line a second at most
            self._last_line = time.monotonic()

    def on_loop_end(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def on_end(self, summary: Summary, final: CheckpointInfo | None) -> None:
        out, ret, run_uri = self.out, summary.episodeReturnMean, summary.runUri
        print(f"{summary.result}: {summary.message} after {summary.iteration} iterations, "
              f"{summary.timesteps:,} env steps in {self.seconds:.1f}s"
              + (f"; return mean {ret:.1f}" if ret is not None else ""), file=out)
        print(f"results:    {run_uri}/results.jsonl", file=out)
        print(f"checkpoint: {summary.lastCheckpoint}", file=out, flush=True)
        if not self.in_cluster and summary.lastCheckpoint:
            print(f"next:       kuberl evaluate {run_uri} --episodes 10; kuberl traces {run_uri} --png curve.png",
                  file=out, flush=True)
            print(f"tensorboard: kuberl tensorboard {run_uri}", file=out, flush=True)
