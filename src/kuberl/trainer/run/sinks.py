"""Result sinks: where each training result goes besides results.jsonl (TensorBoard, MLflow, ...).

The run hands every results line to each sink through the background writer (`ResultLines`, an
observer of the run), so a slow or failing sink never stops training; a sink whose `write` raises
is retried with the storage backoff.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

from kuberl.trainer.run.observer import RunObserver
from kuberl.trainer.storage.background import BackgroundWriter

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import ResultLine
    from kuberl.trainer.storage.run import RunStorage


class ResultSink(Protocol):
    def write(self, result: ResultLine) -> None:
        """Take one result (as written to results.jsonl, `evaluation` included); runs in the background."""

    def close(self) -> None:
        """Flush and release; called once after the last result."""


class ResultSinks:
    """The sinks of one run, fed through one background writer."""

    def __init__(self, sinks: list[ResultSink], background: BackgroundWriter) -> None:
        self.sinks = list(sinks)
        self.background = background

    def write(self, result: ResultLine) -> None:
        for sink in self.sinks:
            self.background.submit(f"{type(sink).__name__} iteration {result.iteration}",
                                   functools.partial(sink.write, result))

    def close(self) -> None:
        for sink in self.sinks:
            self.background.submit(f"closing {type(sink).__name__}", sink.close)


class ResultLines(RunObserver):
    """Each results line into results.jsonl, then to the sinks."""

    def __init__(self, run: RunStorage, sinks: ResultSinks) -> None:
        self.run = run
        self.sinks = sinks

    def on_line(self, line: ResultLine) -> None:
        self.run.append_result(line.to_json())
        self.sinks.write(line)
