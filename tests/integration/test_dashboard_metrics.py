"""Every metric the chart's Grafana dashboard queries is one a running trainer or operator exports.

A real `kuberl train` (Ape-X DQN on CartPole: a rollout worker, a replay shard, the learner, an
evaluation and checkpoints, so that every trainer series exists) serves its status port on
127.0.0.1; the real operator (`python -m kuberl.operator`) runs against the API emulator with one
experiment to reconcile. Both /metrics are scraped, and every metric name in every panel and
variable query of the dashboard that `helm template` puts in the ConfigMap must be a series one of
them carries. The head pod the operator created is checked against the chart's PodMonitor too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kuberl_testing.grafana_dashboard import metric_names, queries, series_names
from kuberl_testing.helm_chart import render
from kuberl_testing.http import get_text
from kuberl_testing.manifests import experiment_manifest
from kuberl_testing.operator_harness import experiment_body, wait_for
from kuberl_testing.ports import free_port
from kuberl_testing.process_tree import reap, stop_gracefully
from kuberl_testing.trainer_process import KUBERL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NAMESPACE = "research"


def _total(exposition: str, name: str) -> float:
    """The sum of the samples called `name` in a scrape (0 when there are none)."""
    return sum(s.value for f in text_string_to_metric_families(exposition) for s in f.samples if s.name == name)


def _scrape(port: int) -> str:
    return get_text(f"http://127.0.0.1:{port}/metrics")[1]


def _scrape_until(port: int, ready: Callable[[str], bool], *, timeout: float, what: str, log: Path) -> str:
    """The first scrape of `port` that `ready` accepts; on a time-out, the process's log in the failure."""
    def scrape() -> str:
        text = _scrape(port)
        return text if ready(text) else ""

    try:
        return wait_for(scrape, timeout=timeout, interval=0.2, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nlog of the process:\n{log.read_text()[-4000:]}") from None


def _meta_label(kind: str, key: str) -> str:
    """The Kubernetes service discovery's name for a pod label or annotation (`kind`: label, annotation)."""
    return f"__meta_kubernetes_pod_{kind}_" + re.sub(r"[^A-Za-z0-9_]", "_", key)


@pytest.fixture
def trainer(tmp_path: Path):
    """`kuberl train` of Ape-X DQN with its status port on 127.0.0.1, in a session of its own; (process, port)."""
    port = free_port()
    manifest = tmp_path / "experiment.yaml"
    manifest.write_text(experiment_manifest(
        "dashboard", algorithm="apex-dqn", config={"learningStarts": 200},
        rollouts={"workers": 1, "envsPerWorker": 4, "fragmentLength": 32}, replay={"shards": 1, "capacity": 5000},
        evaluation={"interval": 2, "episodes": 1, "workers": 0}, checkpoint={"everyIterations": 2, "keep": 2},
        stop={"iterations": 500}, storage={"uri": f"file://{tmp_path}/runs"},
    ))
    with (tmp_path / "trainer.log").open("w") as log:
        proc = subprocess.Popen([KUBERL, "train", "-f", str(manifest), "--status-port", str(port)], cwd=tmp_path,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    yield proc, port
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the trainer and the Ray it started
    proc.wait(30)


def test_every_metric_a_dashboard_panel_queries_is_exported(emulator: Path, tmp_path: Path, trainer) -> None:
    trainer_proc, trainer_port = trainer
    trainer_log = tmp_path / "trainer.log"
    docs = render("grafana.dashboards.enabled=true", "metrics.podMonitor.enabled=true")
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    dashboard = json.loads(config_map["data"]["kuberl.json"])
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]

    metrics_port, health_port = free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(emulator), "KUBERL_LISTEN_HOST": "127.0.0.1",
           "KUBERL_TRAINER_IMAGE": "example/trainer:test", "KUBERL_PEERING": "off"}
    log_path = tmp_path / "operator.log"
    with log_path.open("w") as log:
        operator = subprocess.Popen([sys.executable, "-m", "kuberl.operator", "--namespace", NAMESPACE,
                                     "--metrics-port", str(metrics_port), "--health-port", str(health_port)],
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(str(emulator), client_configuration=configuration)
        api = kubernetes.client.ApiClient(configuration)
        custom, core = kubernetes.client.CustomObjectsApi(api), kubernetes.client.CoreV1Api(api)
        custom.create_namespaced_custom_object("kuberl.io", "v1alpha1", NAMESPACE, "rlexperiments",
                                               experiment_body("exp", workers={"replicas": 0}))

        operator_text = _scrape_until(
            metrics_port, lambda text: (_total(text, "kuberl_operator_reconciles_total") > 0
                                        and _total(text, "kuberl_operator_reconcile_duration_seconds_count") > 0
                                        and "kuberl_operator_experiments" in series_names(text)),
            timeout=120, what="the operator's reconcile metrics", log=log_path)

        def trainer_ready(text: str) -> bool:
            assert trainer_proc.poll() is None, f"the trainer exited:\n{trainer_log.read_text()[-4000:]}"
            return (_total(text, "kuberl_evaluations_total") >= 1
                    and _total(text, "kuberl_checkpoint_duration_seconds_count") >= 1
                    and _total(text, "kuberl_learner_updates_total") > 0
                    and "kuberl_replay_size" in series_names(text))

        trainer_text = _scrape_until(trainer_port, trainer_ready, timeout=240, what="the trainer's metrics",
                                     log=trainer_log)
        stop_gracefully(trainer_proc, timeout=120)  # SIGTERM: a final checkpoint, then Ray stops

        exported = series_names(trainer_text) | series_names(operator_text)
        missing = {where: sorted(metric_names(expr) - exported) for where, expr in queries(dashboard)}
        assert not {where: names for where, names in missing.items() if names}, (
            f"queried but not exported: {missing}\nexported: {sorted(n for n in exported if 'kuberl' in n)}")
        assert all(metric_names(expr) for _, expr in queries(dashboard))  # the tokenizer saw every query's metric

        head = wait_for(lambda: json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["items"],
                        timeout=30, what="the head pod")[0]
        _assert_pod_monitor_scrapes(monitor, head)
        assert stop_gracefully(operator) == 0
    finally:
        reap(operator)


def _assert_pod_monitor_scrapes(monitor: dict[str, Any], pod: dict[str, Any]) -> None:
    """The PodMonitor selects this head pod, scrapes a port it names and relabels from what it carries."""
    meta = pod["metadata"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    carried = {_meta_label("label", k) for k in meta["labels"]} | {_meta_label("annotation", k)
                                                                    for k in meta.get("annotations", {})}
    for relabeling in endpoint["relabelings"]:
        assert set(relabeling["sourceLabels"]) <= carried, relabeling
