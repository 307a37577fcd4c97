"""Stand-in trainers: HTTP servers on loopback that answer the operator's status polls like a training head."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StandInTrainers:
    """`count` HTTP servers on 127.0.0.{first}.. answering GET /status like a training head whose
    iteration grows by `rate` per second."""

    def __init__(self, count: int, port: int, first: int = 60, rate: float = 4.0) -> None:
        self.port, self.rate = port, rate
        self.started = time.monotonic()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                iteration = outer.iteration()
                body = json.dumps({"phase": "Running", "attempt": 1, "iteration": iteration,
                                   "timesteps": iteration * 128, "episodeReturnMean": 20.0 + iteration % 100,
                                   "lastCheckpoint": None}).encode()
                self.send_response(200 if self.path == "/status" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.ips = [f"127.0.0.{first + i}" for i in range(count)]
        self._servers = [ThreadingHTTPServer((ip, port), Handler) for ip in self.ips]
        for server in self._servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def iteration(self) -> int:
        return 1 + int((time.monotonic() - self.started) * self.rate)

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
