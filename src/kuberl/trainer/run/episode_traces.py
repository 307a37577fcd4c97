"""The run's episode traces (traces.enabled): the algorithm's episode sink, one trace writer per
rollout worker, opened at the worker's first episode."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kuberl.trainer.sampling.episode_records import EpisodeRecord
    from kuberl.trainer.storage.run import RunStorage
    from kuberl.trainer.storage.traces import TraceWriter


class EpisodeTraces:
    def __init__(self, run: RunStorage, experiment_name: str) -> None:
        self.run = run
        self.experiment_name = experiment_name
        self.writers: dict[str, TraceWriter] = {}

    def __call__(self, record: EpisodeRecord) -> None:
        worker = str(record.get("worker", 0))
        writer = self.writers.get(worker)
        if writer is None:
            writer = self.writers[worker] = self.run.trace_writer(worker)
        record.setdefault("experiment", self.experiment_name)
        writer.write(record)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
