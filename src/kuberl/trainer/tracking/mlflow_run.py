"""spec.tracking.mlflow: the run's params, metrics by step, final checkpoint and policy in MLflow.

MLflow is optional and never stops training. Every call to the server runs on this sink's own
background thread (a server that hangs delays nothing else), with short HTTP timeouts and no
client-side retries; a failed call is retried with the storage backoff until it succeeds or the
run ends (the results waiting meanwhile are bounded). What cannot work (no mlflow package, a refused
login) turns the sink off. Each problem is logged once as a warning and kept in `problem`, which
the driver copies into results.jsonl and /status.

A resumed run continues the same MLflow run: its id is stored in the run's storage
(tracking/mlflow.json) and reused.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.trainer.storage.base import ObjectStore
from kuberl.trainer.storage.faults import env_seconds
from kuberl.trainer.tracking.scalars import result_scalars
from kuberl.trainer.tracking.sink import TrackerDisabled, TrackerSink

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import ResultLine

log = logging.getLogger(__name__)

RUN_ID_KEY = "tracking/mlflow.json"
HTTP_TIMEOUT_SECONDS = "10"
MAX_PARAM_LENGTH = 6000
# What is queued at the end may wait this long for a slow or unreachable server.
CLOSE_SECONDS_ENV = "KUBERL_MLFLOW_CLOSE_SECONDS"
DEFAULT_CLOSE_SECONDS = 60.0
# Errors no retry fixes: the server refuses us, or what we send.
REFUSED = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})


def flat_params(node: Any, prefix: str = "") -> dict[str, str]:
    """A manifest's spec as MLflow params: dotted keys, leaves as strings (lists as JSON)."""
    params: dict[str, str] = {}
    if isinstance(node, dict) and node:
        for key, value in node.items():
            params.update(flat_params(value, f"{prefix}.{key}" if prefix else str(key)))
    elif prefix:
        text = node if isinstance(node, str) else json.dumps(node)
        params[prefix] = text[:MAX_PARAM_LENGTH]
    return params


class MLflowSink(TrackerSink):
    """A result sink for one MLflow run (MlflowClient: no global state of the mlflow module)."""

    def __init__(self, uri: str, experiment_name: str, store: ObjectStore, *, params: dict[str, str],
                 tags: dict[str, str], run_name: str) -> None:
        super().__init__(store, RUN_ID_KEY, "kuberl-mlflow")
        self.name = f"MLflow at {uri}"
        self.uri = uri
        self.experiment_name = experiment_name
        self.params = params
        self.tags = tags
        self.run_name = run_name
        self.run_id: str | None = None
        self.calls = 0
        self.call_seconds = 0.0
        self._client: Any = None
        self.submit("MLflow run", lambda: None)

    # -- the result sink ---------------------------------------------------------------------------
    def write(self, result: ResultLine) -> None:
        step = result.timesteps
        scalars = result_scalars(result)
        stamp = int(time.time() * 1000)
        self.submit(f"MLflow metrics of iteration {result.iteration}",
                    lambda: self._log_metrics(scalars, step, stamp))

    def close(self) -> None:
        self._worker.close(timeout=env_seconds(CLOSE_SECONDS_ENV, DEFAULT_CLOSE_SECONDS))
        log.info("MLflow: %d calls in %.2fs", self.calls, self.call_seconds)

    def finish(self, status: str, artifacts: Callable[[Path], None] | None = None) -> None:
        """Log the run's last artifacts (written into a directory by `artifacts`) and end the MLflow run."""
        def job() -> None:
            if artifacts is not None:
                with tempfile.TemporaryDirectory(prefix="kuberl-mlflow-") as tmp:
                    artifacts(Path(tmp))
                    self._call(lambda: self._client.log_artifacts(self.run_id, tmp))
            self._call(lambda: self._client.set_terminated(self.run_id, status))

        self.submit("MLflow artifacts", job)

    # -- on the sink's thread ----------------------------------------------------------------------
    def started(self) -> bool:
        return self.run_id is not None

    def refusal(self, error: BaseException) -> str | None:
        if _error_code(error) in REFUSED:
            return f"MLflow at {self.uri} refused the login ({_error_code(error)}): {error}; MLflow is off for this run"
        return None

    def _call(self, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return fn()
        finally:
            self.calls += 1
            self.call_seconds += time.perf_counter() - started

    def start(self) -> None:
        try:
            # Fail fast: the sink's own thread retries, with backoff, while training goes on.
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT_SECONDS)
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise TrackerDisabled(f"spec.tracking.mlflow is set but the mlflow client is not installed ({e}); "
                                 "install kuberl[mlflow]. Training goes on without MLflow") from None
        client = self._client = self._client or MlflowClient(tracking_uri=self.uri)
        run_id = self.stored_run_id()
        if run_id is not None and self._call(functools.partial(_run_exists, client, run_id)):
            self._call(functools.partial(client.update_run, run_id, status="RUNNING"))
            log.info("MLflow: continuing run %s", run_id)
        else:
            experiment = self._call(lambda: client.get_experiment_by_name(self.experiment_name))
            experiment_id = (experiment.experiment_id if experiment is not None
                             else self._call(lambda: client.create_experiment(self.experiment_name)))
            run = self._call(lambda: client.create_run(experiment_id, tags=self.tags, run_name=self.run_name))
            run_id = run.info.run_id
            self.store.put_bytes(RUN_ID_KEY, json.dumps({"runId": run_id, "trackingUri": self.uri,
                                                         "experiment": self.experiment_name}).encode())
            self._log_params(client, run_id)
        for key, value in self.tags.items():  # the attempt changes with every resume
            self._call(functools.partial(client.set_tag, run_id, key, value))
        self.run_id = run_id

    def _log_params(self, client: Any, run_id: str) -> None:
        from mlflow.entities import Param

        items = [Param(key, value) for key, value in sorted(self.params.items())]
        for start in range(0, len(items), 100):  # the server's limit per batch
            self._call(functools.partial(client.log_batch, run_id, params=items[start:start + 100]))

    def _log_metrics(self, scalars: dict[str, float], step: int, stamp: int) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(key, value, stamp, step) for key, value in scalars.items()]
        for start in range(0, len(metrics), 1000):
            self._call(functools.partial(self._client.log_batch, self.run_id, metrics=metrics[start:start + 1000]))


def _run_exists(client: Any, run_id: str) -> bool:
    try:
        client.get_run(run_id)
    except Exception as e:
        if _error_code(e) == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    return True


def _error_code(error: BaseException) -> str:
    code = getattr(error, "error_code", "")
    return str(code or "")
