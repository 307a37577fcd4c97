"""The operator started exactly as the chart's Deployment starts it, against the API emulator.

The container's command, args and env come from `helm template`; the peering object comes from
the chart's post-install hook. Without that object the operator must stay paused (Kopf's named
peering is mandatory); with it, it reconciles, using the trainer image and pod defaults the chart
passed. Probes and metrics answer on the ports the chart declares.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kuberl_testing.helm_chart import RELEASE_NAMESPACE, render
from kuberl_testing.http import get_text
from kuberl_testing.operator_harness import experiment_body, wait_for
from kuberl_testing.ports import free_port
from kuberl_testing.process_tree import reap, stop_gracefully

BIN = Path(sys.executable).parent




def _container_env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:  # the downward API: only metadata.namespace is used
            assert var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            env[var["name"]] = RELEASE_NAMESPACE
    return env


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_operator_runs_as_the_chart_configures_it_and_waits_for_the_charts_peering(emulator, tmp_path):
    metrics_port, health_port = free_port(), free_port()
    docs = render(f"metrics.port={metrics_port}", f"operator.healthPort={health_port}",
                   "trainer.image=registry.test/kuberl-trainer:chart", "trainer.head.cpu=3", "trainer.head.memory=3Gi")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (peering,) = [d for d in docs if d["kind"] == "ClusterKopfPeering"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = [str(BIN / container["command"][0]), *container["command"][1:], *container["args"]]
    env = {**os.environ, **_container_env(container), "KUBECONFIG": str(emulator), "KUBERL_LISTEN_HOST": "127.0.0.1"}

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(emulator), client_configuration=configuration)
    api = kubernetes.client.ApiClient(configuration)
    custom, core = kubernetes.client.CustomObjectsApi(api), kubernetes.client.CoreV1Api(api)

    def pods() -> list[dict[str, Any]]:
        return json.loads(core.list_namespaced_pod("research", _preload_content=False).data)["items"]

    log_path = tmp_path / "operator.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            probe = container["livenessProbe"]["httpGet"]
            wait_for(lambda: get_text(f"http://127.0.0.1:{health_port}{probe['path']}")[0] == 200, timeout=60,
                     what="the liveness probe the chart declares")
            time.sleep(3)  # let Kopf finish its start-up rounds of API discovery before checking the pause
            custom.create_namespaced_custom_object("kuberl.io", "v1alpha1", "research", "rlexperiments",
                                                   experiment_body("exp", workers={"replicas": 0}))
            time.sleep(5)
            assert pods() == [], "the operator reconciled before its peering object existed"

            custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", peering)
            head = wait_for(pods, timeout=60, what="the head pod once the chart's peering exists")[0]
            head_container = head["spec"]["containers"][0]
            assert head_container["image"] == "registry.test/kuberl-trainer:chart"
            assert head_container["resources"]["requests"] == {"cpu": "3", "memory": "3Gi"}

            text = wait_for(lambda: get_text(f"http://127.0.0.1:{metrics_port}/metrics")[1], timeout=20, what="metrics")
            assert "kuberl_operator_reconciles_total" in text

            assert stop_gracefully(proc) == 0
        finally:
            reap(proc)
    assert "Traceback" not in log_path.read_text()
