"""`kuberl train`: run one experiment from a validated manifest until it stops.

The driver owns the process, the training run (kuberl.trainer.run.training_run) owns the run: the
driver reads the trainer's settings once, serves /status and /metrics for the operator while the
run goes on, and turns whatever ended the run into a summary; in a cluster it leaves that summary
in the termination log (the contract with the operator is kuberl.api.contract).
"""

from __future__ import annotations

import traceback

from kuberl.api.contract import RESULT_FAILED, RESULT_INVALID_SPEC
from kuberl.api.field_errors import ManifestError
from kuberl.api.types import RLExperiment
from kuberl.trainer.run.live_status import LiveStatus
from kuberl.trainer.run.log_capture import start_capture
from kuberl.trainer.run.metrics import TrainerMetrics, metrics_registry
from kuberl.trainer.run.settings import TrainerSettings
from kuberl.trainer.run.summary import Summary, write_termination_log
from kuberl.trainer.run.training_run import TrainingRun, TrainOptions
from kuberl.trainer.storage.base import StorageError
from kuberl.trainer.storage.faults import StoreUnavailable

__all__ = ["TrainOptions", "run_training"]


def run_training(experiment: RLExperiment, options: TrainOptions, settings: TrainerSettings | None = None,
                 metrics: TrainerMetrics | None = None) -> Summary:
    """Train to a stop criterion; the summary says how it ended (and the process's exit code). `metrics`:
    the run's metrics (served on /metrics with a status port), for a caller that reads them afterwards."""
    if settings is None:
        settings = TrainerSettings.from_env(in_cluster=options.in_cluster)
    status = LiveStatus(attempt=settings.attempt or 0)
    metrics = TrainerMetrics() if metrics is None else metrics
    server = None
    port = options.status_port
    if port is None and options.in_cluster:
        port = settings.status_port
    if port:
        from kuberl.trainer.run.status_server import start_status_server

        default_host = "0.0.0.0" if options.in_cluster else "127.0.0.1"
        host = settings.status_host if settings.status_host is not None else default_host
        server = start_status_server(status, port, host=host, registry=metrics_registry(metrics))
    capture = start_capture(settings)  # stdout/stderr also into the run's storage, once it is open
    try:
        with TrainingRun(experiment, options, settings, status, logs=capture.chunks if capture else None,
                         metrics=metrics) as run:
            summary = run.train()
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
        if capture is not None:
            capture.stop()
    status.finish(summary.result)
    if options.in_cluster:
        write_termination_log(summary, settings.termination_log)
    return summary
