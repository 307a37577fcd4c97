"""The contract between the operator and the trainer it runs in the head pod.

Both sides import these names, so that a port, an exit code, a summary key, an environment
variable, a credential key or a label is written once. docs/architecture.md ("Contracts") says
what each one means; nothing here imports more than the standard library.
"""

from __future__ import annotations

from typing import TypedDict

# --- labels and annotations on every child of an experiment ----------------------------------------

APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "kuberl"  # the value of APP_LABEL
EXPERIMENT_LABEL = "kuberl.io/experiment"
ROLE_LABEL = "kuberl.io/role"
HEAD_ROLE = "head"
WORKER_ROLE = "worker"
ATTEMPT_ANNOTATION = "kuberl.io/attempt"  # on pods: the attempt they belong to
RESTARTS_ANNOTATION = "kuberl.io/restarts"  # on the experiment: head failures counted so far
FAILED_ATTEMPT_ANNOTATION = "kuberl.io/failed-attempt"  # on the experiment: the last attempt counted

# --- the trainer's status server in the head pod ---------------------------------------------------

DEFAULT_STATUS_PORT = 8080  # the operator's KUBERL_STATUS_PORT setting moves it, and everything on it
STATUS_PATH = "/status"  # JSON: "phase", "attempt" and the PROGRESS_KEYS
METRICS_PATH = "/metrics"

# --- environment the operator sets on the experiment's pods, read by the trainer ------------------

ENV_EXPERIMENT_NAME = "KUBERL_EXPERIMENT_NAME"
ENV_EXPERIMENT_NAMESPACE = "KUBERL_EXPERIMENT_NAMESPACE"
ENV_ATTEMPT = "KUBERL_ATTEMPT"
ENV_EXPECTED_NODES = "KUBERL_EXPECTED_NODES"  # head only: Ray nodes to wait for (1 + workers)
ENV_STATUS_PORT = "KUBERL_STATUS_PORT"  # head only; also the operator's setting of the same name
ENV_IMAGE = "KUBERL_IMAGE"  # head only: the trainer image the pod was built with (the run record keeps it)
ENV_WANDB_API_KEY = "WANDB_API_KEY"  # head only, from spec.tracking.wandb.apiKeySecretRef (W&B's own variable)
# Not set by the operator: the stand-in cluster binds each head to its own address and file.
ENV_STATUS_HOST = "KUBERL_STATUS_HOST"
ENV_TERMINATION_LOG = "KUBERL_TERMINATION_LOG"

# glibc's malloc settings for every process of the experiment's Ray nodes (the trainer sets them on a
# local node it starts, the operator on the pods): why, in kuberl.trainer.distributed.ray_runtime.
MALLOC_ENV: dict[str, str] = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072"}

# --- storage credentials: spec.storage.secretRef's keys become environment variables of that name --

REQUIRED_CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
OPTIONAL_CREDENTIAL_KEYS = ("AWS_SESSION_TOKEN", "AWS_REGION")
REGION_KEY = "AWS_REGION"

# --- how the trainer ends: exit code and the summary in the termination log -----------------------

TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
TERMINATION_LOG_LIMIT = 4000  # the kubelet keeps at most 4096 bytes

RESULT_SUCCEEDED = "Succeeded"
RESULT_FAILED = "Failed"
RESULT_INVALID_SPEC = "InvalidSpec"
RESULT_TERMINATED = "Terminated"

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1  # any code but the three others means the same: retried up to spec.backoffLimit
EXIT_INVALID_SPEC = 2  # the spec or its storage cannot work: never retried
EXIT_TERMINATED = 143  # stopped by SIGTERM after a final checkpoint
EXIT_INTERRUPTED = 130  # stopped by SIGINT (Ctrl-C, which no pod gets) after a final checkpoint

_EXIT_CODES = {RESULT_SUCCEEDED: EXIT_SUCCEEDED, RESULT_INVALID_SPEC: EXIT_INVALID_SPEC,
               RESULT_TERMINATED: EXIT_TERMINATED}



class Progress(TypedDict, total=False):
    """In /status while training and in the summary at the end; the operator copies it to .status."""

    iteration: int
    timesteps: int
    episodeReturnMean: float | None
    evaluationReturnMean: float | None  # the latest evaluation's, with spec.evaluation
    lastCheckpoint: str | None


class TrainerStatus(Progress, total=False):
    """The JSON of GET STATUS_PATH."""

    phase: str  # a Phase: Starting, Running, then Succeeded or Failed (a signal leaves it as it was)
    result: str | None  # how the run ended, once it has: one of the RESULT_* names
    attempt: int
    timeSeconds: float
    envStepsPerSecond: float
    message: str
    trackingProblem: str | None  # why MLflow or W&B is not logging, while it is not (training goes on)


class TerminationSummary(Progress, total=False):
    """The JSON the trainer leaves in the termination log (at most TERMINATION_LOG_LIMIT bytes)."""

    result: str  # one of the RESULT_* names
    reason: str
    message: str


PROGRESS_KEYS = tuple(Progress.__annotations__)
SUMMARY_KEYS = tuple(TerminationSummary.__annotations__)
STATUS_KEYS = tuple(TrainerStatus.__annotations__)


def exit_code_for(result: str) -> int:
    """The trainer's exit code for the summary's `result`."""
    return _EXIT_CODES.get(result, EXIT_FAILED)
