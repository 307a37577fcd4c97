"""Fixtures shared by integration tests: real servers on loopback ports."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuberl_testing.s3server import S3Server

# A Ray call made before init_ray() would start a Ray of its own (Ray's auto-init): on the machine's address, not
# loopback, and never shut down. Set before any test module imports Ray, it makes such a call fail instead.
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")

_bucket_numbers = itertools.count()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server over HTTP on a free 127.0.0.1 port, for the whole session."""
    with S3Server() as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """The S3 server, running, with this process's AWS_* variables pointing at it."""
    if not s3_server.running:
        s3_server.start()
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    yield s3_server
    if not s3_server.running:  # a test that stopped it leaves it usable for the next one
        s3_server.start()


@pytest.fixture
def s3_bucket(s3: S3Server) -> str:
    """A fresh, empty bucket on the S3 server."""
    name = f"kuberl-test-{next(_bucket_numbers)}"
    s3.create_bucket(name)
    return name


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray for the module's tests (shut down after them unless one was running already)."""
    import ray

    from kuberl.trainer.distributed.ray_runtime import init_ray

    started = not ray.is_initialized()
    init_ray(num_cpus=2)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Path]:
    """The API emulator on a free 127.0.0.1 port; its kubeconfig's path."""
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "kuberl_testing.apiserver", "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:")
    yield kubeconfig
    proc.terminate()
    proc.wait(10)
