"""moto's S3 server on a free loopback port, for tests, e2e scenarios and benchmarks.

The server runs in a thread of the calling process (its state lives in moto's
in-process backends), so `stop()` then `start()` on the same port is an outage
the data survives. `stop()` also cuts open keep-alive connections: a stopped
server refuses everything, as a store that went away would.

    with S3Server() as s3:
        s3.create_bucket("runs")
        env = s3.env()                     # AWS_* and endpoint for subprocesses
        store = S3Store("s3://runs/exp", endpoint=s3.endpoint)

Faults for tests, each cleared by clear(): stall(pattern) holds matching PUTs (a write stuck
mid-way), slow(seconds) delays every request (a throttled store), fail(status, ...) answers
500 InternalError or 503 SlowDown to a fraction of the requests, to those matching a pattern or
HTTP methods, forever or for the first `seconds` (then the store answers again by itself).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from kuberl_testing.ports import free_port

DEFAULT_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


_ERRORS = {
    500: b"<Error><Code>InternalError</Code><Message>injected by the test</Message></Error>",
    503: b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
}
_STATUS_LINES = {500: "500 Internal Server Error", 503: "503 Slow Down"}


@dataclass(frozen=True)
class _Failure:
    status: int
    fraction: float
    pattern: str | None
    methods: frozenset[str] | None = None
    until: float | None = None  # time.monotonic() when the failure ends by itself


def _drain_body(environ: dict[str, Any]) -> None:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)


class S3Server:
    """A moto S3 server with start/stop/restart on one fixed loopback port."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stall_pattern: str | None = None
        self._released = threading.Event()
        self._delay = 0.0
        self._failure: _Failure | None = None
        self.stalled = 0  # requests held by stall() so far
        self.delayed = 0  # requests delayed by slow() so far
        self.failed = 0  # requests answered with an error by fail() so far

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def env(self) -> dict[str, str]:
        """Environment for a process that talks to this server through the standard AWS chain."""
        return {**DEFAULT_CREDENTIALS, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def start(self) -> S3Server:
        if self._server is not None:
            return self
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        server_ref = self

        class TrackedHandler(MotoRequestHandler):
            # Remember each open connection so stop() can cut it.
            def setup(self) -> None:
                super().setup()
                with server_ref._lock:
                    server_ref._connections.add(self.connection)

            def finish(self) -> None:
                with server_ref._lock:
                    server_ref._connections.discard(self.connection)
                super().finish()

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one INFO line per request otherwise
        app = self._stalling(DomainDispatcherApplication(create_backend_app))
        # make_server binds in this thread, so a taken port fails here, not in the server thread.
        self._server = make_server(self.host, self.port, app, threaded=True, request_handler=TrackedHandler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-s3", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self.release()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server, self._thread = None, None

    def stall(self, pattern: str) -> None:
        """Hold every PUT whose path contains `pattern` until release(), then fail it with 503:
        a write stuck mid-way (kill the writer meanwhile to get a torn checkpoint)."""
        self._released.clear()
        self._stall_pattern = pattern

    def release(self) -> None:
        self._stall_pattern = None
        self._released.set()

    def slow(self, seconds: float) -> None:
        """Delay every request by `seconds` before it is served: a throttled or distant store."""
        if seconds < 0:
            raise ValueError("slow(): seconds must be >= 0")
        self._delay = float(seconds)

    def fail(self, status: int = 500, *, fraction: float = 1.0, pattern: str | None = None,
             methods: tuple[str, ...] | None = None, seconds: float | None = None) -> None:
        """Answer `status` (500 InternalError or 503 SlowDown) instead of serving a request:
        each request with probability `fraction`, only those whose path contains `pattern` and whose
        HTTP method is one of `methods` if given; for the next `seconds` only if given."""
        if status not in _ERRORS:
            raise ValueError(f"fail(): status must be one of {sorted(_ERRORS)}, not {status}")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("fail(): fraction must be between 0 and 1")
        if seconds is not None and seconds <= 0:
            raise ValueError("fail(): seconds must be > 0")
        until = time.monotonic() + seconds if seconds is not None else None
        chosen = frozenset(m.upper() for m in methods) if methods else None
        self._failure = _Failure(status, fraction, pattern, chosen, until)

    def clear(self) -> None:
        """End every fault: stalled writes are released, no delay, no injected errors."""
        self._delay = 0.0
        self._failure = None
        self.release()

    def _injected_error(self, environ: dict[str, Any]) -> int | None:
        """The status to fail this request with, or None to serve it."""
        failure = self._failure
        if failure is None or (failure.pattern and failure.pattern not in environ.get("PATH_INFO", "")):
            return None
        if failure.methods and environ.get("REQUEST_METHOD", "") not in failure.methods:
            return None
        if failure.until is not None and time.monotonic() >= failure.until:
            return None
        if failure.fraction < 1.0 and random.random() >= failure.fraction:
            return None
        with self._lock:
            self.failed += 1
        return failure.status

    def _stalling(self, app: Any) -> Any:
        def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
            delay = self._delay
            if delay:
                with self._lock:
                    self.delayed += 1
                time.sleep(delay)
            status = self._injected_error(environ)
            if status is not None:
                _drain_body(environ)  # an unread body would be taken for the next request on this connection
                body = _ERRORS[status]
                start_response(_STATUS_LINES[status],
                               [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
                return [body]
            pattern = self._stall_pattern
            if pattern and environ.get("REQUEST_METHOD") == "PUT" and pattern in environ.get("PATH_INFO", ""):
                with self._lock:
                    self.stalled += 1
                self._released.wait(timeout=300)
                # The held write never happens: its writer may be dead by now, and a late
                # success would complete what the test wants left half-written.
                start_response("503 Service Unavailable", [("Content-Type", "application/xml")])
                return [b"<Error><Code>SlowDown</Code><Message>stalled by the test</Message></Error>"]
            return app(environ, start_response)

        return wrapped

    def restart(self) -> S3Server:
        self.stop()
        return self.start()

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=DEFAULT_CREDENTIALS["AWS_REGION"],
            aws_access_key_id=DEFAULT_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DEFAULT_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class S3ServerProcess:
    """The same server in a child process: its own GIL (benchmarks), or its own settings
    through `extra_env` (e.g. INITIAL_NO_AUTH_ACTION_COUNT=0 makes moto check credentials).
    Data does not survive stop()."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.extra_env = extra_env or {}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        return {**DEFAULT_CREDENTIALS, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def start(self, timeout: float = 60.0) -> S3ServerProcess:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kuberl_testing.s3server", str(self.port)],
            env={**os.environ, **self.extra_env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=1):
                return self
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto S3 server did not start on {self.endpoint}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None

    def __enter__(self) -> S3ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """`python -m kuberl_testing.s3server [PORT]`: serve until interrupted."""
    port = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("KUBERL_S3_PORT", "0")) or None
    with S3Server(port=port) as server:
        print(f"moto S3 at {server.endpoint} (credentials: testing/testing)", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


if __name__ == "__main__":
    main()
