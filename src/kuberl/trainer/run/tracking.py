"""The run's trackers, wired for the driver: TensorBoard event files, MLflow, and exported policies.

`sinks` join the run's result sinks (fed through the background writer); `checkpoint` exports the
policy of each checkpoint (checkpoint.export); `finish` gives MLflow the final checkpoint and policy.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.api.contract import ATTEMPT_ANNOTATION, EXPERIMENT_LABEL
from kuberl.trainer.export.run_exports import RunExports
from kuberl.trainer.tracking.tensorboard import TensorBoardSink

if TYPE_CHECKING:
    from kuberl.api.types import RLExperiment
    from kuberl.trainer.storage.background import BackgroundWriter
    from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
    from kuberl.trainer.tracking.mlflow_run import MLflowSink

log = logging.getLogger(__name__)

# How the run ended (the driver's summary result) as an MLflow run status.
MLFLOW_STATUS = {"Succeeded": "FINISHED", "Terminated": "KILLED"}


class RunTracking:
    def __init__(self, experiment: RLExperiment, store: ObjectStore, background: BackgroundWriter, *,
                 attempt: int, namespace: str | None) -> None:
        spec = experiment.spec
        self.store = store
        self.background = background
        self.export_formats = list(spec.checkpoint.export)
        self.tensorboard = TensorBoardSink(store)
        self.exports = RunExports(store, self.export_formats, spec.checkpoint.keep, background)
        self.mlflow: MLflowSink | None = None
        if spec.tracking.mlflow is not None:
            from kuberl.trainer.tracking.mlflow_run import MLflowSink, flat_params

            settings = spec.tracking.mlflow
            tags = {EXPERIMENT_LABEL: experiment.name, ATTEMPT_ANNOTATION: str(attempt),
                    "kuberl.io/namespace": namespace or "", "kuberl.io/algorithm": spec.algorithm,
                    "kuberl.io/env": spec.env.id, "kuberl.io/run": store.uri}
            self.mlflow = MLflowSink(settings.uri, settings.experiment or experiment.name, store,
                                     params=flat_params(experiment.to_manifest()["spec"]), tags=tags,
                                     run_name=experiment.name)

    @property
    def sinks(self) -> list[Any]:
        return [self.tensorboard] + ([self.mlflow] if self.mlflow is not None else [])

    def checkpoint(self, algo: Any, iteration: int) -> None:
        self.exports.submit(algo, iteration)

    def annotate(self, result: dict[str, Any]) -> None:
        """Say in the result when MLflow is not logging (results.jsonl keeps the flag)."""
        if self.mlflow is not None and self.mlflow.problem:
            result["tracking"] = {"mlflow": {"ok": False, "problem": self.mlflow.problem}}

    @property
    def problem(self) -> str | None:
        return self.mlflow.problem if self.mlflow is not None else None

    def finish(self, algo: Any, final: CheckpointInfo | None, result: str) -> None:
        """MLflow gets the final checkpoint's files and the policy exported from the final weights."""
        if self.mlflow is None:
            return
        from kuberl.trainer.export.formats import SUFFIXES, save_policy
        from kuberl.trainer.export.policy import describe, example_input, exported_policy

        policy, example = exported_policy(algo), example_input(algo.observation_space)
        description = describe(algo, checkpoint=final.uri if final is not None else None)
        formats = self.export_formats or ["onnx"]

        def artifacts(directory: Path) -> None:
            if final is not None:
                from kuberl.trainer.storage.checkpoints import read_checkpoint

                files = read_checkpoint(self.store, final)
                (directory / "checkpoint").mkdir()
                for name, data in files.items():
                    (directory / "checkpoint" / name).parent.mkdir(parents=True, exist_ok=True)
                    (directory / "checkpoint" / name).write_bytes(data)
            (directory / "policy").mkdir()
            for fmt in formats:
                save_policy(policy, example, fmt, directory / "policy" / f"policy{SUFFIXES[fmt]}", description)

        mlflow, status = self.mlflow, MLFLOW_STATUS.get(result, "FAILED")
        # Through the run's background writer: after the sinks have been handed every result.
        self.background.submit("MLflow final artifacts", lambda: mlflow.finish(status, artifacts))
