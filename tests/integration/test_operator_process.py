"""The operator as a process: `python -m kuberl.operator` against the emulator process over HTTP.

Checks the probes, the Prometheus metrics, namespace scoping, a clean SIGTERM, and that the
operator never imports torch, ray or gymnasium.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest

from kuberl_testing.http import get_text
from kuberl_testing.operator_harness import experiment_body, wait_for
from kuberl_testing.ports import free_port
from kuberl_testing.process_tree import reap, stop_gracefully

PYTHON = sys.executable


def test_operator_never_imports_the_trainer_stack():
    code = ("import sys, kuberl.operator.main, kuberl.operator.handlers, kuberl.operator.reconcile; "
            "heavy = sorted(m for m in ('torch', 'ray', 'gymnasium') if m in sys.modules); print(heavy)")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture
def emulator_process(tmp_path: Path):
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen([PYTHON, "-m", "kuberl_testing.apiserver", "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:")
    yield url, kubeconfig
    proc.terminate()
    proc.wait(10)


def test_operator_process_serves_probes_metrics_and_watches_only_its_namespace(emulator_process, tmp_path):
    url, kubeconfig = emulator_process
    metrics_port, health_port = free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBERL_LISTEN_HOST": "127.0.0.1",
           "KUBERL_TRAINER_IMAGE": "example/trainer:test", "KUBERL_PEERING": "off"}
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen([PYTHON, "-m", "kuberl.operator", "--namespace", "watched",
                             "--metrics-port", str(metrics_port), "--health-port", str(health_port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: get_text(f"http://127.0.0.1:{health_port}/healthz")[0] == 200, timeout=120, what="liveness")
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        api = kubernetes.client.ApiClient(configuration)
        custom, core = kubernetes.client.CustomObjectsApi(api), kubernetes.client.CoreV1Api(api)
        for ns in ("watched", "other"):
            custom.create_namespaced_custom_object("kuberl.io", "v1alpha1", ns, "rlexperiments",
                                                   experiment_body("exp", workers={"replicas": 0}))

        def pods(ns: str) -> list[dict]:
            return json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"]

        try:
            head = wait_for(lambda: pods("watched"), timeout=60, what="head pod in the watched namespace")[0]
        except AssertionError as exc:
            raise AssertionError(f"{exc}; operator log:\n{(tmp_path / 'operator.log').read_text()[-4000:]}") from None
        assert head["spec"]["containers"][0]["image"] == "example/trainer:test"
        text = wait_for(lambda: "kuberl_operator_experiments{phase=\"Pending\"} 1.0"
                        in get_text(f"http://127.0.0.1:{metrics_port}/metrics")[1]
                        and get_text(f"http://127.0.0.1:{metrics_port}/metrics")[1], timeout=60, what="metrics")
        assert 'kuberl_operator_reconciles_total{result="success"}' in text
        assert "kuberl_operator_reconcile_duration_seconds_bucket" in text
        assert pods("other") == []  # outside the operator's namespaces
        assert stop_gracefully(proc) == 0
    finally:
        reap(proc)
        log.close()
    assert "Traceback" not in (tmp_path / "operator.log").read_text()
