"""What can go wrong talking to a cluster, in words that name the experiment and the namespace.

Each error carries the exit code `kuberl` gives it: 2 for what the user fixes by asking differently (a
name that is not there, a name already taken, a kubeconfig or context that does not exist), 1 for the
rest (the cluster cannot be reached, RBAC refuses, a wait ran out, a run failed).
"""

from __future__ import annotations

import json

from kuberl.api.contract import EXIT_FAILED, EXIT_INVALID_SPEC


class ClientError(Exception):
    exit_code = EXIT_FAILED


class ConfigError(ClientError):
    """No usable kubeconfig, context or namespace."""

    exit_code = EXIT_INVALID_SPEC


class NotFound(ClientError):
    exit_code = EXIT_INVALID_SPEC


class AlreadyExists(ClientError):
    exit_code = EXIT_INVALID_SPEC


class UsageError(ClientError):
    """A command asked in a way that cannot work (a sweep's output without naming a trial)."""

    exit_code = EXIT_INVALID_SPEC


class Ambiguous(ClientError):
    """A bare name that both an RLExperiment and an RLSweep carry."""

    exit_code = EXIT_INVALID_SPEC


class Forbidden(ClientError):
    pass


class Unreachable(ClientError):
    """The API server did not answer."""


class WaitTimeout(ClientError):
    pass


class Invalid(ClientError):
    """The API server refused the object (its schema, admission)."""

    exit_code = EXIT_INVALID_SPEC


def _reason(exc: object) -> str:
    """The API server's own message from an ApiException's body, else its reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            return str(message)
    return str(getattr(exc, "reason", None) or exc)


def from_api_error(exc: Exception, what: str, namespace: str | None) -> ClientError:
    """A ClientError for an ApiException (or a connection failure) met while doing something to `what`
    (such as 'rlexperiment "cartpole"')."""
    where = f" in namespace {namespace!r}" if namespace else ""
    status = getattr(exc, "status", None)
    if status == 404:
        return NotFound(f"{what} not found{where}")
    if status == 409:
        return AlreadyExists(f"{what} already exists{where}")
    if status in (401, 403):
        return Forbidden(f"{what}{where}: forbidden: {_reason(exc)}")
    if status == 422:
        return Invalid(f"{what}{where}: refused by the API server: {_reason(exc)}")
    if status is None or status == 0:
        return Unreachable(f"cannot reach the Kubernetes API server: {_short(exc)}")
    return ClientError(f"{what}{where}: the API server answered {status}: {_reason(exc)}")


def _short(exc: Exception) -> str:
    text = str(getattr(exc, "reason", None) or exc)
    # urllib3's MaxRetryError repeats the URL and the cause; its last part says what happened.
    if "Caused by" in text:
        text = text.rsplit("Caused by", 1)[1].strip(" ()'\"")
    return text.splitlines()[0][:300] if text else type(exc).__name__
