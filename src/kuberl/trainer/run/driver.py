"""`kuberl train`: run one experiment from a validated manifest until it stops.

The driver owns the run, not the algorithm: it checks the env, finds the run's
storage, resumes from the newest complete checkpoint, calls `train()` until a
stop criterion holds, and writes results, checkpoints and traces on the way.
In a cluster it also joins the head's Ray node, serves /status and /metrics
for the operator, and leaves a summary in the termination log (the contract
with the operator is kuberl.api.contract).
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from kuberl.api.contract import (
    DEFAULT_STATUS_PORT,
    ENV_ATTEMPT,
    ENV_EXPECTED_NODES,
    ENV_EXPERIMENT_NAMESPACE,
    ENV_STATUS_HOST,
    ENV_STATUS_PORT,
    ENV_TERMINATION_LOG,
    RESULT_FAILED,
    RESULT_INVALID_SPEC,
    RESULT_SUCCEEDED,
    RESULT_TERMINATED,
    SUMMARY_KEYS,
    TERMINATION_LOG,
    TERMINATION_LOG_LIMIT,
    exit_code_for,
)
from kuberl.api.types import RLExperiment, StopSpec
from kuberl.api.validation import FieldError, ManifestError
from kuberl.trainer.storage.base import StorageError
from kuberl.trainer.storage.faults import StoreUnavailable, retry_transient

if TYPE_CHECKING:
    from kuberl.trainer.algorithms.base import Algorithm
    from kuberl.trainer.run.evaluations import RunEvaluations
    from kuberl.trainer.run.sinks import ResultSinks
    from kuberl.trainer.run.tracking import RunTracking
    from kuberl.trainer.storage.checkpoints import CheckpointWriter
    from kuberl.trainer.storage.run import RunStorage

LOG_LINE_SECONDS = 1.0


@dataclass
class TrainOptions:
    storage_uri: str | None = None  # overrides spec.storage.uri
    fresh: bool = False
    in_cluster: bool = False
    status_port: int | None = None
    quiet: bool = False
    out: TextIO | None = None  # progress and summary; stdout by default
    node_wait_seconds: float = float(os.environ.get("KUBERL_NODE_WAIT_SECONDS", "300"))


@dataclass
class Summary:
    result: str  # Succeeded | Failed | InvalidSpec | Terminated
    reason: str
    message: str
    iteration: int = 0
    timesteps: int = 0
    episodeReturnMean: float | None = None  # noqa: N815 - the contract's key
    evaluationReturnMean: float | None = None  # noqa: N815
    lastCheckpoint: str | None = None  # noqa: N815
    runUri: str | None = None  # noqa: N815

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.result)


def stop_reason(stop: StopSpec, result: dict[str, Any]) -> str | None:
    """Which stop criterion a training result meets, or None to go on."""
    ret = result.get("episodeReturnMean")
    if stop.episode_return_mean is not None and ret is not None and ret >= stop.episode_return_mean:
        return f"episodeReturnMean {ret:.1f} >= {stop.episode_return_mean:g}"
    if stop.timesteps is not None and result.get("timesteps", 0) >= stop.timesteps:
        return f"timesteps {result['timesteps']:,} >= {stop.timesteps:,}"
    evaluated = (result.get("evaluation") or {}).get("returnMean")
    if stop.evaluation_return_mean is not None and evaluated is not None and evaluated >= stop.evaluation_return_mean:
        return f"evaluationReturnMean {evaluated:.1f} >= {stop.evaluation_return_mean:g}"
    if stop.iterations is not None and result.get("iteration", 0) >= stop.iterations:
        return f"iteration {result['iteration']} >= {stop.iterations}"
    if stop.time_seconds is not None and result.get("timeSeconds", 0.0) >= stop.time_seconds:
        return f"timeSeconds {result['timeSeconds']:.0f} >= {stop.time_seconds}"
    return None


def progress_line(result: dict[str, Any]) -> str:
    ret = result.get("episodeReturnMean")
    ret_text = f"{ret:8.1f}" if isinstance(ret, int | float) and math.isfinite(ret) else "       -"
    evaluated = (result.get("evaluation") or {}).get("returnMean")
    return (
        f"iter {result.get('iteration', 0):5d} | steps {result.get('timesteps', 0):>11,} | "
        f"{result.get('envStepsPerSecond', 0.0):>9,.0f} steps/s | return {ret_text} | "
        f"{result.get('timeSeconds', 0.0):7.1f}s"
        + (f" | eval {evaluated:.1f}" if isinstance(evaluated, int | float) else "")
    )


@dataclass
class LiveStatus:
    """What GET /status answers; updated by the training loop, read by the status server."""

    phase: str = "Starting"
    attempt: int = 1
    iteration: int = 0
    timesteps: int = 0
    episodeReturnMean: float | None = None  # noqa: N815
    evaluationReturnMean: float | None = None  # noqa: N815
    lastCheckpoint: str | None = None  # noqa: N815
    timeSeconds: float = 0.0  # noqa: N815
    envStepsPerSecond: float = 0.0  # noqa: N815
    trackingProblem: str | None = None  # noqa: N815 - why MLflow is not logging, while it is not
    message: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}

    def update(self, **values: Any) -> None:
        with self.lock:
            for key, value in values.items():
                setattr(self, key, value)


class _Termination:
    """SIGTERM/SIGINT ask the loop to stop after the current iteration and checkpoint first."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal_name = ""
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested.is_set():  # a second signal: stop now
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        self.requested.set()

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _write_termination_log(summary: Summary) -> None:
    path = os.environ.get(ENV_TERMINATION_LOG, TERMINATION_LOG)
    body = {k: v for k, v in asdict(summary).items() if k in SUMMARY_KEYS}
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(body)[:TERMINATION_LOG_LIMIT])
    except OSError as exc:
        print(f"warning: cannot write termination log {path}: {exc}", file=sys.stderr)


def _resolve_run(experiment: RLExperiment, options: TrainOptions):
    """The run's store, creating a fresh run directory when asked. Raises StorageError, ManifestError."""
    from kuberl.trainer.storage import open_store
    from kuberl.trainer.storage.checkpoints import latest_checkpoint
    from kuberl.trainer.storage.run import RunStorage, fresh_run_root_uri, run_root_uri

    spec = experiment.spec
    root = run_root_uri(options.storage_uri or spec.storage.uri, _namespace(experiment, options), experiment.name)
    store = open_store(root, endpoint=spec.storage.endpoint, region=spec.storage.region)
    store.check()
    if options.fresh and (store.exists("experiment.yaml") or latest_checkpoint(store) is not None):
        store = open_store(fresh_run_root_uri(root), endpoint=spec.storage.endpoint, region=spec.storage.region)
    run = RunStorage(store)
    conflicts = run.resume_conflicts(experiment.to_manifest())
    if conflicts:
        raise ManifestError([FieldError(*c.split(": ", 1)) for c in conflicts])
    return store, run


def _namespace(experiment: RLExperiment, options: TrainOptions) -> str | None:
    """The experiment's namespace in a cluster (a run's storage path has it); None locally."""
    if not options.in_cluster:
        return None
    return os.environ.get(ENV_EXPERIMENT_NAMESPACE) or experiment.metadata.namespace or "default"


def run_training(experiment: RLExperiment, options: TrainOptions) -> Summary:
    """Train to a stop criterion; the summary says how it ended (and the process's exit code)."""
    out = options.out or sys.stdout
    status = LiveStatus(attempt=int(os.environ.get(ENV_ATTEMPT, "0") or 0))
    server = None
    port = options.status_port
    if port is None and options.in_cluster:
        port = int(os.environ.get(ENV_STATUS_PORT, DEFAULT_STATUS_PORT))
    if port:
        from kuberl.trainer.run.status_server import start_status_server

        default_host = "0.0.0.0" if options.in_cluster else "127.0.0.1"
        server = start_status_server(status, port, host=os.environ.get(ENV_STATUS_HOST, default_host))
    try:
        summary = _train(experiment, options, status, out)
    except ManifestError as exc:
        if not options.in_cluster:
            raise
        summary = Summary(RESULT_INVALID_SPEC, "InvalidSpec", "; ".join(str(e) for e in exc.errors))
    except StorageError as exc:
        if not options.in_cluster:
            raise
        summary = Summary(RESULT_INVALID_SPEC, "StorageError", str(exc))
    except StoreUnavailable as exc:  # transient errors past the deadline: retryable (exit 1)
        if not options.in_cluster:
            raise
        summary = Summary(RESULT_FAILED, "StorageUnavailable", str(exc))
    except Exception as exc:  # in a pod the summary must say why, whatever it was
        if not options.in_cluster:
            raise
        traceback.print_exc()
        summary = Summary(RESULT_FAILED, type(exc).__name__, str(exc))
    finally:
        if server is not None:
            server.shutdown()
    status.update(phase=summary.result)
    if options.in_cluster:
        _write_termination_log(summary)
    return summary


def _train(experiment: RLExperiment, options: TrainOptions, status: LiveStatus, out: TextIO) -> Summary:
    from kuberl.trainer.run.checks import callbacks_errors, env_errors
    from kuberl.trainer.run.memory_budget import replay_memory_errors_for

    errors = env_errors(experiment) + callbacks_errors(experiment)
    errors = errors or replay_memory_errors_for(experiment, in_cluster=options.in_cluster)
    if errors:
        raise ManifestError(errors)
    log = functools.partial(print, file=out, flush=True)
    store, run = retry_transient(lambda: _resolve_run(experiment, options), "storage", log=log)
    if ENV_ATTEMPT not in os.environ:
        status.update(attempt=retry_transient(run.next_attempt, "storage", log=log))
    run.attempt = status.attempt  # an older head can no longer rewrite this attempt's results

    if options.in_cluster:
        expected = int(os.environ.get(ENV_EXPECTED_NODES, 1 + experiment.spec.workers.replicas))
        from kuberl.trainer.distributed.ray_runtime import join_cluster

        join_cluster(expected, options.node_wait_seconds, out)

    from kuberl.trainer.algorithms.config import algorithm_config_for
    from kuberl.trainer.run.evaluations import RunEvaluations
    from kuberl.trainer.run.sinks import ResultSinks
    from kuberl.trainer.run.tracking import RunTracking
    from kuberl.trainer.storage.background import BackgroundWriter
    from kuberl.trainer.storage.checkpoints import CheckpointWriter, restore_latest

    algo = algorithm_config_for(experiment).build()
    termination = _Termination()
    writers: dict[str, Any] = {}
    from kuberl.trainer.run import metrics

    def on_written(info) -> None:
        metrics.CHECKPOINT_SECONDS.observe(checkpoints.last_duration_seconds or 0.0)
        status.update(lastCheckpoint=info.uri)
        algo.callbacks.on_checkpoint_written(
            algorithm=algo, checkpoint={"uri": info.uri, "iteration": info.iteration, "timesteps": info.timesteps})

    # before_commit: results.jsonl reaches the store before a checkpoint's manifest, so a kill
    # right after a checkpoint never loses the result line of the iteration it holds.
    checkpoints = CheckpointWriter(store, keep=experiment.spec.checkpoint.keep, attempt=status.attempt,
                                   on_written=on_written, before_commit=run.flush)
    background = BackgroundWriter("kuberl-background")
    sinks = ResultSinks([], background)  # per-result writers (TensorBoard, MLflow) join this list
    tracking = RunTracking(experiment, store, background, attempt=status.attempt,
                           namespace=_namespace(experiment, options) or experiment.metadata.namespace)
    sinks.sinks.extend(tracking.sinks)
    evaluations = None
    try:
        # Falls back past a checkpoint that no longer verifies; retries a store that is unwell.
        restored = retry_transient(lambda: restore_latest(store), "restoring the latest checkpoint", log=log)
        if restored is not None:
            files, latest = restored
            algo.set_state(files)
            run.truncate_results(latest.iteration)
            status.update(iteration=latest.iteration, timesteps=latest.timesteps, lastCheckpoint=latest.uri)
            print(f"resuming from {latest.uri} (iteration {latest.iteration}, {latest.timesteps:,} steps)",
                  file=out, flush=True)
        spec_text = yaml.safe_dump(experiment.to_manifest(), sort_keys=False)
        run.write_spec(spec_text)
        if experiment.spec.traces.enabled:
            algo.episode_sink = _episode_sink(run, writers, experiment)
        print(f"training {experiment.spec.algorithm} on {experiment.spec.env.id}; run: {store.uri}", file=out,
              flush=True)
        if experiment.spec.evaluation is not None:
            evaluations = RunEvaluations(
                experiment, algo, store=store, checkpoints=checkpoints, background=background,
                on_result=lambda e: status.update(evaluationReturnMean=e.get("returnMean")),
                snapshot=lambda: _state(algo, spec_text),
            )
        status.update(phase="Running")
        termination.install()
        return _loop(experiment=experiment, options=options, algo=algo, run=run, checkpoints=checkpoints,
                     spec_text=spec_text, status=status, termination=termination, out=out, run_uri=store.uri,
                     evaluations=evaluations, sinks=sinks, tracking=tracking)
    finally:
        termination.restore()
        if evaluations is not None:
            evaluations.stop()
        sinks.close()
        background.close()
        for writer in writers.values():
            writer.close()
        checkpoints.close()
        run.close()
        algo.stop()


def _episode_sink(run, writers: dict[str, Any], experiment: RLExperiment):
    name = experiment.name

    def sink(record: dict[str, Any]) -> None:
        worker = str(record.get("worker", 0))
        writer = writers.get(worker)
        if writer is None:
            writer = writers[worker] = run.trace_writer(worker)
        record.setdefault("experiment", name)
        writer.write(record)

    return sink


def _loop(*, experiment: RLExperiment, options: TrainOptions, algo: Algorithm, run: RunStorage,
          checkpoints: CheckpointWriter, spec_text: str, status: LiveStatus, termination: _Termination, out: TextIO,
          run_uri: str, evaluations: RunEvaluations | None, sinks: ResultSinks,
          tracking: RunTracking) -> Summary:
    """Train until a stop criterion or a signal, checkpointing on the way; then the final checkpoint."""
    from kuberl.trainer.run import metrics

    spec = experiment.spec
    every = spec.checkpoint.every_iterations
    tty = out.isatty() and not options.quiet
    result: dict[str, Any] = {}
    reason = None
    last_line = 0.0
    while reason is None and not termination.requested.is_set():
        result = algo.train()
        result["attempt"] = status.attempt
        tracking.annotate(result)
        extra_lines: list[dict[str, Any]] = []
        if evaluations is not None:
            evaluations.step(result)
        reason = stop_reason(spec.stop, result)
        if evaluations is not None and reason is not None:  # a signal skips it: the grace period is short
            extra_lines = evaluations.finish(result)  # the last iteration's policy is evaluated too
        for line in (result, *extra_lines):
            run.append_result(line)
            sinks.write(line)
        status.update(
            iteration=result["iteration"], timesteps=result["timesteps"],
            episodeReturnMean=result.get("episodeReturnMean"), timeSeconds=result.get("timeSeconds", 0.0),
            envStepsPerSecond=result.get("envStepsPerSecond", 0.0), trackingProblem=tracking.problem,
        )
        metrics.observe_result(result)
        if reason is None and result["iteration"] % every == 0:
            checkpoints.submit(result["iteration"], _state(algo, spec_text), result["timesteps"])
            tracking.checkpoint(algo, result["iteration"])
        if tty:
            print("\r" + progress_line(result), end="", file=out, flush=True)
        elif not options.quiet and (reason or time.monotonic() - last_line >= LOG_LINE_SECONDS):
            print(progress_line(result), file=out, flush=True)  # logs get a line a second at most
            last_line = time.monotonic()
    if tty:
        print(file=out)
    if result:
        checkpoints.submit(result["iteration"], _state(algo, spec_text), result["timesteps"])
        tracking.checkpoint(algo, result["iteration"])
    final = checkpoints.wait(timeout=float(os.environ.get("KUBERL_FINAL_CHECKPOINT_SECONDS", "600")))
    last_uri = final.uri if final is not None else None
    if reason is None:
        summary = Summary(RESULT_TERMINATED, termination.signal_name or "Terminated",
                          f"stopped by {termination.signal_name or 'a signal'} after a final checkpoint")
    else:
        summary = Summary(RESULT_SUCCEEDED, "StopCriterion", reason)
    summary.iteration = result.get("iteration", 0)
    summary.timesteps = result.get("timesteps", 0)
    summary.episodeReturnMean = result.get("episodeReturnMean")
    summary.evaluationReturnMean = status.snapshot()["evaluationReturnMean"]
    summary.lastCheckpoint = last_uri
    summary.runUri = run_uri
    tracking.finish(algo, final, summary.result)
    status.update(lastCheckpoint=last_uri, message=summary.message)
    ret = summary.episodeReturnMean
    print(f"{summary.result}: {summary.message} after {summary.iteration} iterations, "
          f"{summary.timesteps:,} env steps in {result.get('timeSeconds', 0.0):.1f}s"
          + (f"; return mean {ret:.1f}" if ret is not None else ""), file=out)
    print(f"results:    {run_uri}/results.jsonl", file=out)
    print(f"checkpoint: {last_uri}", file=out, flush=True)
    if not options.in_cluster and last_uri:
        print(f"next:       kuberl evaluate {run_uri} --episodes 10; kuberl traces {run_uri} --png curve.png",
              file=out, flush=True)
        print(f"tensorboard: kuberl tensorboard {run_uri}", file=out, flush=True)
    return summary


def _state(algo: Algorithm, spec_text: str) -> dict[str, bytes]:
    files = dict(algo.get_state())
    files["experiment.yaml"] = spec_text.encode()
    return files
