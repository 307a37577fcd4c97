"""The head pod's small HTTP server: GET /status (JSON) for the operator, /metrics for Prometheus."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from kuberl.api.contract import METRICS_PATH, STATUS_PATH


class StatusSource(Protocol):
    def snapshot(self) -> dict: ...


class StatusServer:
    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread):
        self._httpd = httpd
        self._thread = thread

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def start_status_server(source: StatusSource, port: int, host: str = "0.0.0.0",
                        registry: CollectorRegistry | None = None) -> StatusServer:
    """Serve in a daemon thread; port 0 picks a free one (see StatusServer.port). /metrics serves
    `registry` (the run's: kuberl.trainer.run.metrics.metrics_registry), or prometheus_client's default."""
    metrics_source = registry if registry is not None else REGISTRY

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == STATUS_PATH:
                self._send(200, "application/json", json.dumps(source.snapshot()).encode())
            elif path == METRICS_PATH:
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(metrics_source))
            elif path in ("/healthz", "/readyz"):
                self._send(200, "text/plain", b"ok")
            else:
                self._send(404, "text/plain", b"not found")

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet access log
            pass

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="kuberl-status", daemon=True)
    thread.start()
    return StatusServer(httpd, thread)
