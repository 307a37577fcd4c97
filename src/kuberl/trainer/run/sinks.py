"""Result sinks: where each training result goes besides results.jsonl (TensorBoard, MLflow, ...).

The driver hands every result to each sink through the background writer, so a slow or failing
sink never stops training; a sink whose `write` raises is retried with the storage backoff.
"""

from __future__ import annotations

from typing import Any, Protocol

from kuberl.trainer.storage.background import BackgroundWriter


class ResultSink(Protocol):
    def write(self, result: dict[str, Any]) -> None:
        """Take one result (as written to results.jsonl, `evaluation` included); runs in the background."""

    def close(self) -> None:
        """Flush and release; called once after the last result."""


class ResultSinks:
    """The sinks of one run, fed through one background writer."""

    def __init__(self, sinks: list[ResultSink], background: BackgroundWriter) -> None:
        self.sinks = list(sinks)
        self.background = background

    def write(self, result: dict[str, Any]) -> None:
        for sink in self.sinks:
            self.background.submit(f"{type(sink).__name__} iteration {result.get('iteration')}",
                                   lambda sink=sink: sink.write(result))

    def close(self) -> None:
        for sink in self.sinks:
            self.background.submit(f"closing {type(sink).__name__}", sink.close)
