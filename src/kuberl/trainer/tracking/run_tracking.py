"""The run's trackers, an observer of the run: TensorBoard event files, MLflow, and exported policies.

`sinks` join the run's result sinks (fed through the background writer); each checkpoint's policy is
exported (checkpoint.export); at the end MLflow gets the final checkpoint and policy.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.api.contract import ATTEMPT_ANNOTATION, EXPERIMENT_LABEL, RESULT_SUCCEEDED, RESULT_TERMINATED
from kuberl.trainer.export.run_exports import RunExports
from kuberl.trainer.run.observer import RunObserver
from kuberl.trainer.tracking.tensorboard import TensorBoardSink

if TYPE_CHECKING:
    from kuberl.api.types import RLExperiment
    from kuberl.trainer.run.summary import Summary
    from kuberl.trainer.storage.background import BackgroundWriter
    from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
    from kuberl.trainer.tracking.mlflow_run import MLflowSink

log = logging.getLogger(__name__)

# How the run ended (the driver's summary result) as an MLflow run status.
MLFLOW_STATUS = {RESULT_SUCCEEDED: "FINISHED", RESULT_TERMINATED: "KILLED"}


class RunTracking(RunObserver):
    def __init__(self, experiment: RLExperiment, algo: Any, store: ObjectStore, background: BackgroundWriter, *,
                 attempt: int, namespace: str | None) -> None:
        spec = experiment.spec
        self.algo = algo
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

    @property
    def problem(self) -> str | None:
        return self.mlflow.problem if self.mlflow is not None else None

    def on_result(self, result: dict[str, Any]) -> None:
        """Say in the result when MLflow is not logging (results.jsonl keeps the flag)."""
        if self.mlflow is not None and self.mlflow.problem:
            result["tracking"] = {"mlflow": {"ok": False, "problem": self.mlflow.problem}}

    def on_checkpoint(self, iteration: int) -> None:
        self.exports.submit(self.algo, iteration)

    def on_end(self, summary: Summary, final: CheckpointInfo | None) -> None:
        """MLflow gets the final checkpoint's files and the policy exported from the final weights."""
        if self.mlflow is None:
            return
        from kuberl.trainer.export.formats import SUFFIXES, save_policy
        from kuberl.trainer.export.policy import describe, example_input, exported_policy

        algo = self.algo
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

        mlflow, status = self.mlflow, MLFLOW_STATUS.get(summary.result, "FAILED")
        # Through the run's background writer: after the sinks have been handed every result.
        self.background.submit("MLflow final artifacts", lambda: mlflow.finish(status, artifacts))
