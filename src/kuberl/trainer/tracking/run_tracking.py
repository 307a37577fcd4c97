"""The run's trackers, an observer of the run: TensorBoard event files, MLflow, W&B, and exported policies.

`sinks` join the run's result sinks (fed through the background writer); each checkpoint's policy is
exported (checkpoint.export); at the end MLflow and W&B get the final checkpoint and policy.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.api.contract import ATTEMPT_ANNOTATION, EXPERIMENT_LABEL, RESULT_SUCCEEDED, RESULT_TERMINATED
from kuberl.trainer.export.run_exports import RunExports
from kuberl.trainer.run.observer import RunObserver
from kuberl.trainer.tracking.tensorboard import TensorBoardSink

if TYPE_CHECKING:
    from kuberl.api.types import RLExperiment
    from kuberl.trainer.iteration_result import IterationResult
    from kuberl.trainer.run.summary import Summary
    from kuberl.trainer.storage.background import BackgroundWriter
    from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
    from kuberl.trainer.tracking.mlflow_run import MLflowSink
    from kuberl.trainer.tracking.wandb_run import WandbSink

log = logging.getLogger(__name__)

# How the run ended (the driver's summary result) as an MLflow run status.
MLFLOW_STATUS = {RESULT_SUCCEEDED: "FINISHED", RESULT_TERMINATED: "KILLED"}
# ... and as a W&B exit code (W&B marks a run with a non-zero one as failed).
WANDB_EXIT_CODE = {RESULT_SUCCEEDED: 0, RESULT_TERMINATED: 0}


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
        self.wandb: WandbSink | None = None
        if spec.tracking.wandb is not None and spec.tracking.wandb.mode != "disabled":
            self.wandb = _wandb_sink(experiment, store, attempt=attempt, namespace=namespace)

    @property
    def sinks(self) -> list[Any]:
        return [self.tensorboard] + [sink for sink in (self.mlflow, self.wandb) if sink is not None]

    @property
    def problem(self) -> str | None:
        problems = [sink.problem for sink in (self.mlflow, self.wandb) if sink is not None and sink.problem]
        return "; ".join(problems) if problems else None

    def on_result(self, result: IterationResult) -> IterationResult:
        """Say in the result when MLflow or W&B is not logging (results.jsonl keeps the flag)."""
        problems = {name: sink.problem for name, sink in (("mlflow", self.mlflow), ("wandb", self.wandb))
                    if sink is not None and sink.problem}
        return replace(result, tracking=problems) if problems else result

    def on_checkpoint(self, iteration: int) -> None:
        self.exports.submit(self.algo, iteration)
        if self.wandb is not None:
            self.wandb.sync_files()

    def on_end(self, summary: Summary, final: CheckpointInfo | None) -> None:
        """MLflow and W&B get the final checkpoint's files and the policy exported from the final weights (a
        multi-agent run: each of its policies, `policy/policy-NAME.onnx`)."""
        if self.mlflow is None and self.wandb is None:
            return
        from kuberl.trainer.export.formats import SUFFIXES, save_policy
        from kuberl.trainer.export.policy import describe, example_input, exported_policy

        algo = self.algo
        checkpoint = final.uri if final is not None else None
        names: tuple[str | None, ...] = tuple(getattr(algo, "policy_names", ())) or (None,)
        exports: list[tuple[str, Any, Any, str]] = []  # (file stem, policy, example input, description)
        for name in names:
            if name is not None:
                algo.select_policy(name)
            exports.append((f"policy-{name}" if name is not None else "policy", exported_policy(algo),
                            example_input(algo.observation_space),
                            describe(algo, checkpoint=checkpoint, **({"policy": name} if name is not None else {}))))
        if names[0] is not None:
            algo.select_policy(names[0])  # what the rest of the run describes: the first policy
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
            for stem, policy, example, description in exports:
                for fmt in formats:
                    save_policy(policy, example, fmt, directory / "policy" / f"{stem}{SUFFIXES[fmt]}", description)

        # Through the run's background writer: after the sinks have been handed every result.
        if self.mlflow is not None:
            mlflow, status = self.mlflow, MLFLOW_STATUS.get(summary.result, "FAILED")
            self.background.submit("MLflow final artifacts", lambda: mlflow.finish(status, artifacts))
        if self.wandb is not None:
            wandb, code = self.wandb, WANDB_EXIT_CODE.get(summary.result, 1)
            self.background.submit("W&B final artifacts", lambda: wandb.finish(code, artifacts))


def _wandb_sink(experiment: RLExperiment, store: ObjectStore, *, attempt: int, namespace: str | None) -> WandbSink:
    from kuberl import __version__
    from kuberl.trainer.storage.local import LocalStore
    from kuberl.trainer.tracking.wandb_run import WandbSink, wandb_config

    settings = experiment.spec.tracking.wandb
    assert settings is not None
    facts = {"experiment": experiment.name, "namespace": namespace or "", "attempt": attempt,
             "run": store.uri, "version": __version__}
    return WandbSink(store, settings, config=wandb_config(experiment.to_manifest()["spec"], facts),
                     run_name=experiment.name, local_root=store.root if isinstance(store, LocalStore) else None)
