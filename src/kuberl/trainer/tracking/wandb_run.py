"""spec.tracking.wandb: the run's config, every scalar by env step, evaluation videos, the final
checkpoint and the exported policy in Weights & Biases.

Built like the MLflow sink (mlflow_run.py): W&B never stops training. Every W&B call runs on this
sink's own background thread; a failed start (an unreachable server) is retried with the storage
backoff while results wait (bounded), and what cannot work (no wandb package, a refused or missing
API key) turns the sink off. Each problem is logged once as a warning and kept in `problem`, which the
driver copies into results.jsonl and /status (the operator's TrackingDegraded condition). Once a run
has started, W&B's own service buffers and retries uploads: logging never waits on the network.

The W&B run's id is kept in the run's storage (tracking/wandb.json), so a resumed run (a restarted
head, `kuberl train` again) continues the same W&B run. Results are logged with `timesteps` as W&B's
step metric (`define_metric`), so a resume from an older checkpoint, which logs env steps again, never
trips W&B's rule that `step` only grows.

W&B's files go under `wandb/` in the run's directory: directly for a local run, and for a run on S3
into a local directory whose files (offline mode: the `.wandb` log, media and artifact files, for
`wandb sync`) are copied to `wandb/` in the store at each checkpoint and at the end.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.trainer.storage.base import NotFound, ObjectStore
from kuberl.trainer.storage.faults import env_seconds
from kuberl.trainer.tracking.scalars import result_scalars
from kuberl.trainer.tracking.sink import TrackerDisabled, TrackerSink

if TYPE_CHECKING:
    from kuberl.api.types import WandbSpec
    from kuberl.trainer.iteration_result import ResultLine

log = logging.getLogger(__name__)

RUN_ID_KEY = "tracking/wandb.json"
WANDB_DIR = "wandb"  # W&B's own name for its folder, below the directory it is given
CLOSE_SECONDS_ENV = "KUBERL_WANDB_CLOSE_SECONDS"
DEFAULT_CLOSE_SECONDS = 60.0
INIT_SECONDS_ENV = "KUBERL_WANDB_INIT_SECONDS"  # how long one start may wait for the server
DEFAULT_INIT_SECONDS = 60.0
STEP_METRIC = "timesteps"
VIDEO_KEY = "evaluation/video"


def wandb_config(spec: dict[str, Any], kuberl: dict[str, Any]) -> dict[str, Any]:
    """The W&B config: the resolved spec at the top (W&B shows `config.lr`, `env.id`, `rollouts.workers`,
    the names MLflow's params have) and kuberl's own facts under `kuberl`."""
    return {**spec, "kuberl": kuberl}


def logged_row(result: ResultLine) -> dict[str, float | int]:
    """What one result logs: its scalars (named as in TensorBoard), the iteration and the step metric."""
    row: dict[str, float | int] = dict(result_scalars(result))
    row["iteration"] = result.iteration
    row[STEP_METRIC] = result.timesteps
    return row


def key_of(store: ObjectStore, uri: str) -> str | None:
    """The store's key of a URI under its root (an evaluation's video), or None."""
    root = store.uri.rstrip("/") + "/"
    return uri[len(root):] if uri.startswith(root) else None


class WandbSink(TrackerSink):
    """A result sink for one W&B run (its own `Run` object: no global state of the wandb module)."""

    name = "W&B"

    def __init__(self, store: ObjectStore, settings: WandbSpec, *, config: dict[str, Any], run_name: str,
                 local_root: Path | None = None) -> None:
        super().__init__(store, RUN_ID_KEY, "kuberl-wandb")
        self.project, self.entity, self.group = settings.project, settings.entity, settings.group
        self.tags, self.mode = list(settings.tags), settings.mode
        self.config = config
        self.run_name = run_name
        self.run_id: str | None = None
        self.files_uploaded = 0
        # A local run keeps W&B's folder in its own directory; otherwise a temporary one, copied to the store.
        self.upload = local_root is None
        self.root = local_root if local_root is not None else Path(tempfile.mkdtemp(prefix="kuberl-wandb-"))
        self._run: Any = None
        self._finished = False
        self._artifacts_logged = False
        self._uploaded: dict[str, tuple[int, int]] = {}  # key -> (size, mtime_ns) already in the store
        self.submit("W&B run", lambda: None)

    # -- the result sink ---------------------------------------------------------------------------
    def write(self, result: ResultLine) -> None:
        row = logged_row(result)
        video = result.evaluation.video if result.evaluation is not None else None
        self.submit(f"W&B metrics of iteration {result.iteration}", lambda: self._log(row, video))

    def sync_files(self) -> None:
        """Copy W&B's new or grown files into the store (offline mode on a remote store); at checkpoints."""
        if self.upload and self.mode == "offline":
            self.submit("W&B files", self._upload_files)

    def finish(self, exit_code: int, artifacts: Callable[[Path], None] | None = None) -> None:
        """Log the run's last artifacts (written into a directory by `artifacts`) and finish the W&B run."""
        def job() -> None:
            if artifacts is not None and not self._artifacts_logged:  # once, though a failed finish is retried
                self._log_artifacts(artifacts)
                self._artifacts_logged = True
            self._finish(exit_code)

        self.submit("W&B artifacts", job)

    def close(self) -> None:
        self._worker.close(timeout=env_seconds(CLOSE_SECONDS_ENV, DEFAULT_CLOSE_SECONDS))
        if self._run is not None and not self._finished:
            try:  # a run never finished (the writer gave up on its jobs): end it so its files are complete
                self._finish(1)
            except Exception as e:
                log.warning("W&B: finishing the run failed: %s", e)
        if self.upload:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- on the sink's thread ----------------------------------------------------------------------
    def started(self) -> bool:
        return self._run is not None

    def refusal(self, error: BaseException) -> str | None:
        if _refused(error):
            return f"W&B refused the API key ({type(error).__name__}: {str(error)[:300]}); W&B is off for this run"
        return None

    def start(self) -> None:
        try:
            import wandb
        except ImportError as e:
            raise TrackerDisabled(f"spec.tracking.wandb is set but the wandb client is not installed ({e}); "
                                "install kuberl[wandb]. Training goes on without W&B") from None
        run_id = self.stored_run_id()
        if run_id is None:
            run_id = uuid.uuid4().hex[:16]
            self.store.put_bytes(RUN_ID_KEY, json.dumps({"runId": run_id, "project": self.project,
                                                         "entity": self.entity, "mode": self.mode}).encode())
        self.root.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(init_timeout=env_seconds(INIT_SECONDS_ENV, DEFAULT_INIT_SECONDS), silent=True)
        try:
            run = wandb.init(
                project=self.project, entity=self.entity, group=self.group, tags=self.tags or None, mode=self.mode,
                id=run_id, resume="allow", name=self.run_name, dir=str(self.root), config=self.config,
                reinit="create_new", settings=settings,
            )
        except wandb.errors.UsageError as e:
            if "api key" in str(e).lower() or "api_key" in str(e).lower():
                raise TrackerDisabled(f"W&B has no API key ({e}); set spec.tracking.wandb.apiKeySecretRef (or "
                                    "WANDB_API_KEY locally), or mode: offline. Training goes on without W&B") from None
            raise
        run.config.update({"kuberl": self.config.get("kuberl", {})}, allow_val_change=True)  # this attempt's
        run.define_metric(STEP_METRIC)
        run.define_metric("*", step_metric=STEP_METRIC)
        self._run, self.run_id = run, run_id
        log.info("W&B: run %s (%s)%s", run_id, self.mode, f" {run.url}" if getattr(run, "url", None) else "")

    def _log(self, logged: dict[str, float | int], video: str | None) -> None:
        row: dict[str, Any] = dict(logged)
        if video:
            media = self._video(video)
            if media is not None:
                row[VIDEO_KEY] = media
        self._run.log(row)

    def _video(self, uri: str) -> Any:
        import wandb

        key = key_of(self.store, uri)
        if key is None:
            return None
        path = self.root / "kuberl-videos" / Path(key).name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.store.get_file(key, path)
        except NotFound:
            log.warning("W&B: the evaluation video %s is not in the store; not logged", uri)
            return None
        return wandb.Video(str(path), format="mp4")

    def _log_artifacts(self, artifacts: Callable[[Path], None]) -> None:
        import wandb

        # Inside W&B's folder, referenced in place (no copy in a staging area outside it), so an offline
        # run's artifacts travel with its files.
        directory = self.root / WANDB_DIR / "kuberl-artifacts" / (self.run_id or "run")
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        artifacts(directory)
        for name in ("checkpoint", "policy"):
            if (directory / name).is_dir():
                artifact = wandb.Artifact(f"{self.run_name}-{name}", type="model",
                                          metadata={"kuberl": self.config.get("kuberl", {})})
                artifact.add_dir(str(directory / name), skip_cache=True, policy="immutable")
                self._run.log_artifact(artifact, aliases=["latest", "final"])

    def _finish(self, exit_code: int) -> None:
        if not self._finished:
            self._run.finish(exit_code=exit_code)
            self._finished = True
        self._upload_files()

    def _upload_files(self) -> None:
        if not self.upload or self.mode != "offline":
            return
        base = self.root / WANDB_DIR
        for path in sorted(base.rglob("*")) if base.is_dir() else []:
            if not path.is_file() or path.is_symlink():
                continue
            stat = path.stat()
            key = f"{WANDB_DIR}/{path.relative_to(base).as_posix()}"
            if self._uploaded.get(key) == (stat.st_size, stat.st_mtime_ns):
                continue
            self.store.put_file(key, path)
            self._uploaded[key] = (stat.st_size, stat.st_mtime_ns)
            self.files_uploaded += 1


def _refused(error: BaseException) -> bool:
    try:
        from wandb.errors import AuthenticationError
    except ImportError:
        return False
    return isinstance(error, AuthenticationError)
