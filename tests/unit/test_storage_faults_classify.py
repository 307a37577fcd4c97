"""classify(): which storage errors a retry can fix, over botocore's own exception classes;
retry_transient(): the bounded retry at start, on a fake clock."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
    SSLError,
)

from kuberl.trainer.storage.base import NotFound, StorageError
from kuberl.trainer.storage.faults import (
    DEFAULT_RETRY_SECONDS,
    RETRY_SECONDS_ENV,
    StoreUnavailable,
    TransientStorageError,
    classify,
    retry_seconds,
    retry_transient,
)


def client_error(code: str, status: int, operation: str = "ListObjectsV2") -> ClientError:
    """A ClientError as botocore builds it from an S3 error response."""
    return ClientError({"Error": {"Code": code, "Message": "..."},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


@pytest.mark.parametrize("error", [
    client_error("InternalError", 500),
    client_error("SlowDown", 503),
    client_error("ServiceUnavailable", 503),
    client_error("503", 503, "HeadBucket"),  # a HEAD answer has no body: the code is the status
    client_error("BadGateway", 502),
    client_error("GatewayTimeout", 504),
    client_error("RequestTimeout", 400),
    client_error("TooManyRequestsException", 429),
    client_error("SomethingNew", 500),  # an unknown code with a 5xx status
    EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),  # refused: the store's pod restarting
    ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"),
    ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
    ConnectionClosedError(endpoint_url="http://127.0.0.1:9"),
    ConnectionRefusedError(111, "Connection refused"),
    TimeoutError("timed out"),
    TransientStorageError("storage s3://b/p: the store answered 500"),
], ids=lambda e: type(e).__name__ + (f"-{e.response['Error']['Code']}" if isinstance(e, ClientError) else ""))
def test_an_unwell_store_is_transient(error: BaseException) -> None:
    assert classify(error) == "transient"


@pytest.mark.parametrize("error", [
    client_error("NoSuchBucket", 404),
    client_error("404", 404, "HeadBucket"),
    client_error("AccessDenied", 403),
    client_error("403", 403, "HeadBucket"),
    client_error("InvalidAccessKeyId", 403),
    client_error("SignatureDoesNotMatch", 403),
    client_error("InvalidBucketName", 400),
    NoCredentialsError(),
    PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"),
    ParamValidationError(report="Invalid bucket name"),
    SSLError(endpoint_url="https://127.0.0.1:9", error="certificate verify failed"),
    ValueError("Invalid endpoint: not a url"),
    StorageError("storage s3://b/p: bucket 'b' does not exist"),
    NotFound("s3://b/p/k"),
    KeyError("a bug, not the store"),
], ids=lambda e: type(e).__name__ + (f"-{e.response['Error']['Code']}" if isinstance(e, ClientError) else ""))
def test_a_users_mistake_is_permanent(error: BaseException) -> None:
    assert classify(error) == "permanent"


def test_transient_errors_are_retried_until_the_store_answers() -> None:
    calls, slept, lines = [], [], []

    def operation() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise client_error("SlowDown", 503)
        return "ok"

    assert retry_transient(operation, "storage", seconds=60, log=lines.append, sleep=slept.append) == "ok"
    assert len(calls) == 4 and len(slept) == 3 and all(0 < s <= 10 for s in slept)
    assert all("transient storage error" in ln and "SlowDown" in ln for ln in lines)


def test_a_permanent_error_goes_through_at_once() -> None:
    calls = []

    def operation() -> None:
        calls.append(1)
        raise StorageError("storage s3://b/p: access denied")

    with pytest.raises(StorageError, match="access denied"):
        retry_transient(operation, "storage", seconds=60, sleep=lambda s: pytest.fail("slept"))
    assert calls == [1]


def test_past_the_deadline_the_last_error_ends_it_as_store_unavailable() -> None:
    now = [0.0]

    def operation() -> None:
        raise client_error("InternalError", 500) if now[0] < 5 else EndpointConnectionError(endpoint_url="http://s3")

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(StoreUnavailable) as caught:
        retry_transient(operation, "storage", seconds=30, log=lambda _: None, sleep=sleep, clock=lambda: now[0])
    assert 30 <= now[0] < 30.001  # the last wait is cut to the deadline
    message = str(caught.value)
    assert "in 30 s" in message and RETRY_SECONDS_ENV in message
    assert "last error: EndpointConnectionError" in message and "http://s3" in message
    assert classify(caught.value) == "transient"


def test_retry_seconds_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RETRY_SECONDS_ENV, raising=False)
    assert retry_seconds() == DEFAULT_RETRY_SECONDS == 120
    monkeypatch.setenv(RETRY_SECONDS_ENV, "7.5")
    assert retry_seconds() == 7.5
    monkeypatch.setenv(RETRY_SECONDS_ENV, "-3")
    assert retry_seconds() == 0
    monkeypatch.setenv(RETRY_SECONDS_ENV, "soon")
    assert retry_seconds() == DEFAULT_RETRY_SECONDS
