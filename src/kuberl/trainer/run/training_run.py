"""One training run: the parts it opens, owned by one `ExitStack` (closed in reverse, whatever
happens), the loop, and how it ends (Sample Factory's runner).

The loop only trains and decides when to stop; what each result does (results.jsonl and the
sinks, the live status, the metrics, checkpoints, evaluation, tracking, the progress line, the
user's callbacks) is an observer's (kuberl.trainer.run.observer).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TextIO

from kuberl.api.contract import RESULT_SUCCEEDED, RESULT_TERMINATED
from kuberl.api.field_errors import FieldError, ManifestError
from kuberl.api.types import Phase
from kuberl.api.yaml_text import dump_yaml
from kuberl.trainer.run.metrics import TrainerMetrics
from kuberl.trainer.run.observer import Observers
from kuberl.trainer.run.summary import Summary, stop_reason
from kuberl.trainer.run.termination import Termination
from kuberl.trainer.storage.faults import retry_transient
from kuberl.trainer.storage.run import SPEC

if TYPE_CHECKING:
    from kuberl.api.types import RLExperiment
    from kuberl.trainer.algorithms.base import Algorithm
    from kuberl.trainer.evaluation.run_evaluations import RunEvaluations
    from kuberl.trainer.iteration_result import EvaluationLine, IterationResult
    from kuberl.trainer.run.checkpoint_cadence import CheckpointCadence
    from kuberl.trainer.run.episode_traces import EpisodeTraces
    from kuberl.trainer.run.live_status import LiveStatus
    from kuberl.trainer.run.settings import TrainerSettings
    from kuberl.trainer.run.sinks import ResultSinks
    from kuberl.trainer.run.task_defaults import DefaultsRecord
    from kuberl.trainer.storage.background import BackgroundWriter
    from kuberl.trainer.storage.base import CheckpointInfo, ObjectStore
    from kuberl.trainer.storage.checkpoints import CheckpointWriter
    from kuberl.trainer.storage.logs import LogChunks
    from kuberl.trainer.storage.run import RunStorage
    from kuberl.trainer.tracking.run_tracking import RunTracking


@dataclass
class TrainOptions:
    """`kuberl train`'s options."""

    storage_uri: str | None = None  # overrides spec.storage.uri
    fresh: bool = False
    in_cluster: bool = False
    status_port: int | None = None
    quiet: bool = False
    out: TextIO | None = None  # progress and summary; stdout by default


class TrainingRun:
    """`with TrainingRun(...) as run: summary = run.train()`."""

    # The parts `_open` builds (the stack closes them), `_resume` and `_observe` set.
    algo: Algorithm
    checkpoints: CheckpointWriter
    traces: EpisodeTraces
    background: BackgroundWriter
    sinks: ResultSinks
    tracking: RunTracking
    spec_text: str
    cadence: CheckpointCadence

    def __init__(self, experiment: RLExperiment, options: TrainOptions, settings: TrainerSettings,
                 status: LiveStatus, logs: LogChunks | None = None, metrics: TrainerMetrics | None = None) -> None:
        self.experiment = experiment
        self.metrics = TrainerMetrics() if metrics is None else metrics  # the driver's, when it serves them on /metrics
        self.logs = logs  # the process's output, written under logs/ once the storage is open
        self.options = options
        self.settings = settings
        self.status = status
        self.out = options.out or sys.stdout
        self.log = functools.partial(print, file=self.out, flush=True)
        self.observers = Observers()
        self.termination = Termination()
        self._stack = contextlib.ExitStack()
        self._defaults_record: DefaultsRecord | None = None
        self._defaults_line = ""

    def __enter__(self) -> TrainingRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    @property
    def namespace(self) -> str | None:
        """The experiment's namespace in a cluster (a run's storage path has it); None locally."""
        if not self.options.in_cluster:
            return None
        return self.settings.namespace or self.experiment.metadata.namespace or "default"

    def train(self) -> Summary:
        """Train until a stop criterion or a signal, checkpointing on the way; then the final checkpoint."""
        self._check()
        store, run = retry_transient(self._open_storage, "storage", log=self.log)
        if self.settings.attempt is None:
            self.status.update(attempt=retry_transient(run.next_attempt, "storage", log=self.log))
        run.attempt = self.status.attempt  # an older head can no longer rewrite this attempt's results
        if self.logs is not None:
            self.logs.attach(store, self.status.attempt)
        if self.options.in_cluster:
            from kuberl.trainer.distributed.ray_runtime import join_cluster

            expected = self.settings.expected_nodes
            join_cluster(1 + self.experiment.spec.workers.replicas if expected is None else expected,
                         self.settings.node_wait_seconds, self.out)
        self._open(store, run)
        self._resume(store, run)
        self._observe(store, run)
        self.status.update(phase=Phase.RUNNING)
        self.termination.install()
        self._stack.callback(self.termination.restore)

        result: IterationResult | None = None
        reason = None
        while reason is None and not self.termination.requested.is_set():
            result = replace(self.algo.train_iteration(), attempt=self.status.attempt)
            if self._defaults_record is not None:  # the first results line says what the defaults chose
                result, self._defaults_record = replace(result, defaults=self._defaults_record), None
            result = self.observers.on_result(result)
            reason = stop_reason(self.experiment.spec.stop, result)
            after: list[EvaluationLine] = []
            if reason is not None:  # such as an evaluation of the last policy; a signal's grace period is too short
                result, after = self.observers.on_last_result(result)
            lines: list[IterationResult | EvaluationLine] = [result, *after]
            for line in lines:
                self.observers.on_line(line)
            self.observers.on_iteration_end(result, stopping=reason is not None)
        return self._end(result, reason, store.uri)

    def _check(self) -> None:
        from kuberl.trainer.run.checks import callbacks_errors, env_errors
        from kuberl.trainer.run.memory_budget import replay_memory_errors_for
        from kuberl.trainer.run.task_defaults import resolve_task_defaults

        errors = env_errors(self.experiment) + callbacks_errors(self.experiment)
        if errors:
            raise ManifestError(errors)
        # The task kind's defaults, written into the experiment: everything after trains and records them.
        self.experiment, defaults = resolve_task_defaults(self.experiment)
        if defaults is not None:  # the line follows "training ... on ...", the record goes into the first results line
            self._defaults_line, self._defaults_record = defaults.line(), defaults.record()
        errors = replay_memory_errors_for(self.experiment, in_cluster=self.options.in_cluster)
        if errors:
            raise ManifestError(errors)

    def _open_storage(self) -> tuple[ObjectStore, RunStorage]:
        """The run's store, creating a fresh run directory when asked. Raises StorageError, ManifestError."""
        from kuberl.trainer.storage import open_store
        from kuberl.trainer.storage.checkpoints import latest_checkpoint
        from kuberl.trainer.storage.run import RunStorage, fresh_run_root_uri, run_root_uri

        experiment, spec = self.experiment, self.experiment.spec
        root = run_root_uri(self.options.storage_uri or spec.storage.uri, self.namespace, experiment.name)
        store = open_store(root, endpoint=spec.storage.endpoint, region=spec.storage.region)
        store.check()
        if self.options.fresh and (store.exists(SPEC) or latest_checkpoint(store) is not None):
            store = open_store(fresh_run_root_uri(root), endpoint=spec.storage.endpoint, region=spec.storage.region)
        run = RunStorage(store)
        conflicts = run.resume_conflicts(experiment.to_manifest())
        if conflicts:
            raise ManifestError([FieldError(*c.split(": ", 1)) for c in conflicts])
        return store, run

    def _open(self, store: ObjectStore, run: RunStorage) -> None:
        """The algorithm and the writers, each closed by the stack (in reverse: what opens last closes first)."""
        from kuberl.trainer.algorithms.config import algorithm_config_for
        from kuberl.trainer.run.episode_traces import EpisodeTraces
        from kuberl.trainer.run.sinks import ResultSinks
        from kuberl.trainer.storage.background import BackgroundWriter
        from kuberl.trainer.storage.checkpoints import CheckpointWriter
        from kuberl.trainer.tracking.run_tracking import RunTracking

        experiment, spec, stack = self.experiment, self.experiment.spec, self._stack
        self.algo = algorithm_config_for(experiment).build()
        stack.callback(self.algo.stop)
        stack.callback(run.close)
        # before_commit: results.jsonl reaches the store before a checkpoint's manifest, so a kill
        # right after a checkpoint never loses the result line of the iteration it holds.
        self.checkpoints = CheckpointWriter(store, keep=spec.checkpoint.keep, attempt=self.status.attempt,
                                            on_written=self._checkpoint_written, before_commit=run.flush)
        stack.callback(self.checkpoints.close)
        self.traces = EpisodeTraces(run, experiment.name)
        stack.callback(self.traces.close)
        self.background = BackgroundWriter("kuberl-background")
        stack.callback(self.background.close)
        self.sinks = ResultSinks([], self.background)  # per-result writers (TensorBoard, MLflow) join this list
        stack.callback(self.sinks.close)
        self.tracking = RunTracking(experiment, self.algo, store, self.background, attempt=self.status.attempt,
                                    namespace=self.namespace or experiment.metadata.namespace)
        self.sinks.sinks.extend(self.tracking.sinks)

    def _resume(self, store: ObjectStore, run: RunStorage) -> None:
        """From the newest complete checkpoint, if there is one; then the run's spec and traces."""
        from kuberl.trainer.run.run_record import write_record
        from kuberl.trainer.storage.checkpoints import restore_latest

        spec = self.experiment.spec
        # Falls back past a checkpoint that no longer verifies; retries a store that is unwell.
        restored = retry_transient(lambda: restore_latest(store), "restoring the latest checkpoint", log=self.log)
        if restored is not None:
            files, latest = restored
            self._load(files, latest, store)
            run.truncate_results(latest.iteration)
            self.status.update(iteration=latest.iteration, timesteps=latest.timesteps, lastCheckpoint=latest.uri)
            print(f"resuming from {latest.uri} (iteration {latest.iteration}, {latest.timesteps:,} steps)",
                  file=self.out, flush=True)
        elif (restore_uri := spec.checkpoint.restore_from) is not None:
            from kuberl.trainer.run.restore_from import restore_from

            source = retry_transient(lambda: restore_from(self.algo, restore_uri, endpoint=spec.storage.endpoint,
                                                          region=spec.storage.region),
                                     "restoring spec.checkpoint.restoreFrom", log=self.log)
            self.status.update(iteration=source.iteration, timesteps=source.timesteps)
            print(f"starting from {source.uri} (iteration {source.iteration}, {source.timesteps:,} steps) with "
                  "this manifest's hyperparameters", file=self.out, flush=True)
        self.spec_text = dump_yaml(self.experiment.to_manifest(), sort_keys=False)
        run.write_spec(self.spec_text)
        # spec.learner.bf16 as resolved
        bf16 = self._defaults_record["machine"].get("bf16") if self._defaults_record is not None else None
        retry_transient(lambda: write_record(store, self.experiment, attempt=self.status.attempt,
                                             namespace=self.namespace, learner_bf16=bf16),
                        "writing the run record", log=self.log)
        if spec.traces.enabled:
            self.algo.episode_sink = self.traces
        print(f"training {spec.algorithm} on {spec.env.id}; run: {store.uri}", file=self.out, flush=True)
        if self._defaults_line:
            self.log(self._defaults_line)

    def _load(self, files: dict[str, bytes], latest: CheckpointInfo, store: ObjectStore) -> None:
        """The run's own checkpoint into the algorithm. One that does not fit this experiment (another network or
        observation filter, a file it lacks) is the user's error, named by the settings that differ from its
        experiment.yaml: a network of other layers would not load, one of another activation or filter would
        train on as another policy."""
        from kuberl.trainer.algorithms.checkpoint_fit import misfit_error, model_mismatch_errors

        def misfit(detail: str = "") -> ManifestError:
            problem = f"the checkpoint {latest.uri} of the run at {store.uri} does not fit this experiment"
            return ManifestError([misfit_error(files, self.algo.params, problem,
                                               "it cannot resume (use --fresh or another storage.uri)", detail)])

        if model_mismatch_errors(files, self.algo.params, latest.uri):
            raise misfit()
        try:
            self.algo.set_state(files)
        except (RuntimeError, KeyError, ValueError) as exc:
            raise misfit(" ".join(str(exc).split())[:300]) from None  # torch's message spans lines

    def _observe(self, store: ObjectStore, run: RunStorage) -> None:
        """The observers of each result, in the order their hooks are called."""
        from kuberl.trainer.run.callbacks import CallbacksObserver
        from kuberl.trainer.run.checkpoint_cadence import CheckpointCadence
        from kuberl.trainer.run.live_status import LiveStatusObserver
        from kuberl.trainer.run.progress import Progress
        from kuberl.trainer.run.sinks import ResultLines

        spec, observers, tracking = self.experiment.spec, self.observers, self.tracking
        observers.add(tracking)  # first: what it adds to a result goes before the evaluation
        if spec.evaluation is not None:
            observers.add(self._evaluations(store))
        observers.add(ResultLines(run, self.sinks))
        observers.add(LiveStatusObserver(self.status, lambda: tracking.problem))
        observers.add(self.metrics)
        self.cadence = CheckpointCadence(self.checkpoints, spec.checkpoint.every_iterations, self.state,
                                         observers.on_checkpoint)
        observers.add(self.cadence)
        observers.add(Progress(self.out, quiet=self.options.quiet, in_cluster=self.options.in_cluster,
                               stop=spec.stop))
        observers.add(CallbacksObserver(self.algo))

    def _evaluations(self, store: ObjectStore) -> RunEvaluations:
        from kuberl.trainer.evaluation.run_evaluations import BestCheckpoint, RunEvaluations

        spec = self.experiment.spec
        assert spec.evaluation is not None
        best = BestCheckpoint(store, self.checkpoints, self.state) if spec.checkpoint.keep_best else None
        evaluations = RunEvaluations(spec.evaluation, self.algo, store=store, background=self.background, best=best,
                                     report=self.observers.on_evaluation)
        self._stack.callback(evaluations.stop)
        return evaluations

    def state(self) -> dict[str, bytes]:
        """What a checkpoint holds: the algorithm's state and the experiment it trains."""
        files = dict(self.algo.get_state())
        files[SPEC] = self.spec_text.encode()
        return files

    def _checkpoint_written(self, info: CheckpointInfo) -> None:
        self.observers.on_checkpoint_written(info, self.checkpoints.last_duration_seconds or 0.0)

    def _end(self, result: IterationResult | None, reason: str | None, run_uri: str) -> Summary:
        self.observers.on_loop_end()
        final = self.cadence.final(result, timeout=self.settings.final_checkpoint_seconds)
        if reason is None:
            signal_name = self.termination.signal_name
            summary = Summary(RESULT_TERMINATED, signal_name or RESULT_TERMINATED,
                              f"stopped by {signal_name or 'a signal'} after a final checkpoint")
        else:
            summary = Summary(RESULT_SUCCEEDED, "StopCriterion", reason)
        if result is not None:
            summary.iteration, summary.timesteps = result.iteration, result.timesteps
            summary.episodeReturnMean = result.episode_return_mean
        summary.evaluationReturnMean = self.status.snapshot()["evaluationReturnMean"]
        summary.lastCheckpoint = final.uri if final is not None else None
        summary.runUri = run_uri
        self.observers.on_end(summary, final)
        return summary
