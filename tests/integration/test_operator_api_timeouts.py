"""An API server that accepts a connection and never answers (a dropped connection behind a load balancer, an
API server stuck on etcd) must not hold an operator thread, and with it an experiment's reconcile, for ever:
every request the operator's client makes times out, and the reconcile is retried.

The server here is a real listening socket on loopback that reads the request and says nothing.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import urllib3

from kuberl.operator.cluster import Cluster, load_api_client
from kuberl_testing.apiserver.kubeconfig import write_kubeconfig

pytestmark = pytest.mark.timeout(300)

SHORT = (1.0, 0.5)  # (connect, read) seconds
# urllib3 retries a read that timed out up to 3 times: 4 reads of 0.5 s, about 2 s. Without a timeout the call
# never returns; this bound only tells the two apart, with room for a loaded machine.
HANG_GUARD = 30.0


@pytest.fixture
def silent_server() -> Iterator[str]:
    """http://127.0.0.1:PORT of a server that accepts connections, reads what it is sent and never replies."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for conn in accepted:
            conn.close()


@pytest.fixture
def cluster(silent_server: str, tmp_path, monkeypatch) -> Cluster:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", silent_server)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return Cluster(load_api_client(pool_size=2, request_timeout=SHORT))


def _fails_within(call, seconds: float) -> BaseException:
    started = time.monotonic()
    with pytest.raises((urllib3.exceptions.HTTPError, OSError)) as raised:
        call()
    elapsed = time.monotonic() - started
    assert elapsed < seconds, f"the request gave up after {elapsed:.1f} s"
    return raised.value


def test_reads_and_writes_to_a_silent_api_server_time_out(cluster: Cluster):
    _fails_within(lambda: cluster.experiment("research", "cartpole"), HANG_GUARD)
    _fails_within(lambda: cluster.pods("research", "app=kuberl"), HANG_GUARD)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cartpole", "namespace": "research"}}
    _fails_within(lambda: cluster.create(config_map), HANG_GUARD)
    _fails_within(lambda: cluster.patch_experiment_status("research", "cartpole", {"phase": "Running"}), HANG_GUARD)


def test_a_call_that_sets_its_own_timeout_keeps_it(cluster: Cluster):
    started = time.monotonic()
    with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
        cluster.core.read_namespaced_config_map("cartpole", "research", _request_timeout=(1.0, 2.0))
    assert time.monotonic() - started >= 2.0  # its own read timeout, not the client's 0.5 s
