"""Which storage errors a retry can fix, how long to back off, and retrying for a bounded time at start.

Only a user's mistakes are permanent: a bucket that does not exist, access denied or a wrong key,
no credentials, a malformed endpoint or bucket name. Everything a store says while it is unwell
(500 InternalError, 503 SlowDown, throttling, timeouts, a refused connection while its pod
restarts) is transient: the trainer retries it with the shared backoff for
KUBERL_STORAGE_RETRY_SECONDS (120 s by default), then exits as a retryable failure (exit 1) with
the last error, so that the operator counts the attempt against backoffLimit instead of failing
the experiment as InvalidSpec.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from kuberl.trainer.storage.errors import StorageError

Fault = Literal["permanent", "transient"]
T = TypeVar("T")

RETRY_SECONDS_ENV = "KUBERL_STORAGE_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 120.0

# S3 error codes a store answers while busy or unwell (botocore's standard retry mode retries the same).
TRANSIENT_CODES = frozenset({
    "InternalError", "ServiceUnavailable", "SlowDown", "Throttling", "ThrottlingException",
    "ThrottledException", "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "RequestTimeout", "RequestTimeoutException",
    "PriorRequestNotComplete", "OperationAborted",
})
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class TransientStorageError(RuntimeError):
    """A storage error a retry may fix (a busy or restarting store); the message names the URI."""


class StoreUnavailable(RuntimeError):
    """Transient storage errors went on past the retry deadline: a retryable failure, not a user's mistake."""


def classify(error: BaseException) -> Fault:
    """Whether a retry can fix `error`, raised by boto3/botocore or by a store of this package."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        CredentialRetrievalError,
        HTTPClientError,
        IncompleteReadError,
        SSLError,
    )
    from botocore.exceptions import (
        ConnectionError as BotoConnectionError,
    )

    if isinstance(error, TransientStorageError | StoreUnavailable):
        return "transient"
    if isinstance(error, StorageError):  # raised for what no retry fixes (NoSuchBucket, AccessDenied, ...)
        return "permanent"
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return "transient" if code in TRANSIENT_CODES or status in TRANSIENT_STATUSES else "permanent"
    if isinstance(error, SSLError):  # a certificate the client refuses: the endpoint's configuration
        return "permanent"
    if isinstance(error, BotoConnectionError | HTTPClientError | ConnectionClosedError | IncompleteReadError
                  | CredentialRetrievalError):
        return "transient"
    if isinstance(error, ConnectionError | TimeoutError):  # the standard library's (socket level)
        return "transient"
    # NoCredentialsError, ParamValidationError (a malformed bucket name), ValueError("Invalid
    # endpoint"), and anything that is no storage error at all: a retry does not change them.
    return "permanent"


def retry_delay(failures: int, base: float = 0.5, cap: float = 10.0) -> float:
    """Seconds to wait after `failures` failures in a row: exponential with full jitter (spreads the
    retries of many writers apart), capped; any count is safe (no float overflow)."""
    return random.uniform(0.5 * min(cap, base), min(cap, base * 2 ** min(failures, 32)))


def env_seconds(name: str, default: float) -> float:
    """A duration from the environment variable `name` (seconds, at least 0); `default` if unset or not a number."""
    raw = os.environ.get(name, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else default
    except ValueError:
        return default


def retry_seconds() -> float:
    """How long transient errors at start are retried (KUBERL_STORAGE_RETRY_SECONDS, default 120)."""
    return env_seconds(RETRY_SECONDS_ENV, DEFAULT_RETRY_SECONDS)


def retry_transient(operation: Callable[[], T], what: str, *, seconds: float | None = None,
                    log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> T:
    """operation(), retried with retry_delay() while it fails transiently and `seconds` have not
    passed; permanent errors go through at once; past the deadline, StoreUnavailable with the
    last error."""
    budget = retry_seconds() if seconds is None else seconds
    deadline = clock() + budget
    failures = 0
    while True:
        try:
            return operation()
        except Exception as error:
            if classify(error) == "permanent":
                raise
            failures += 1
            left = deadline - clock()
            if left <= 0:
                raise StoreUnavailable(
                    f"{what}: the store still fails after {failures} attempt(s) in {budget:.0f} s "
                    f"({RETRY_SECONDS_ENV}); last error: {_describe(error)}"
                ) from error
            delay = min(left, retry_delay(failures))
            log(f"{what}: transient storage error, retrying in {delay:.1f} s: {_describe(error)}")
            sleep(delay)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if not isinstance(error, TransientStorageError) else str(error)
