"""The chart's Grafana dashboard and trainer PodMonitor.

Both are off by default. On, the dashboard is a ConfigMap for Grafana's dashboard sidecar (its label,
namespace and folder annotation configurable) holding charts/kuberl/dashboards/kuberl.json, and the
PodMonitor fits prometheus-operator's CRD and selects the head pods the operator builds, on their
status port. The dashboard itself: ids, layout, datasource, variables, every trainer query scoped to
the chosen experiments, and the PromQL tokenizer with which tests/integration/test_dashboard_metrics.py
checks that every metric it queries is exported.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kuberl.api.validation import validate_document
from kuberl.operator.builders import Owner, build_head_pod, build_worker_pod, resolve_experiment
from kuberl.operator.settings import Settings
from kuberl_testing.grafana_dashboard import (
    DASHBOARD,
    GRAFANA_VARIABLES,
    load_dashboard,
    metric_names,
    panels,
    queries,
    variable_query,
    variables_used,
)
from kuberl_testing.helm_chart import HELM, ROOT
from kuberl_testing.schemas import KUBERNETES_VERSION, as_json_schema

CHART = ROOT / "charts" / "kuberl"
MONITORING_VALUES = ("-f", str(CHART / "ci" / "monitoring-values.yaml"))
PODMONITOR_CRD = ROOT / "tests" / "fixtures" / "prometheus-operator-crds" / "podmonitor.yaml"
NOT_IN_KUBERNETES = {"ServiceMonitor", "PodMonitor", "ClusterKopfPeering", "KopfPeering"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCOPE = ('namespace=~"$namespace"', 'experiment=~"$experiment"')


@pytest.fixture(scope="module")
def helm() -> Path:
    if not HELM.exists():
        subprocess.run(["make", "tools"], cwd=ROOT, check=True, capture_output=True, timeout=600)
    return HELM


@functools.cache
def _template(helm: Path, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), "template", "kuberl", str(CHART), "-n", "kuberl-system", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    proc = _template(helm, args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def dashboard_config_maps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "ConfigMap" and "kuberl.json" in d.get("data", {})]


def pod_monitors(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "PodMonitor"]


def validate_pod_monitor(monitor: dict[str, Any]) -> None:
    import jsonschema

    crd = yaml.safe_load(PODMONITOR_CRD.read_text())
    group, _, version = monitor["apiVersion"].rpartition("/")
    assert (group, monitor["kind"]) == (crd["spec"]["group"], crd["spec"]["names"]["kind"])
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    jsonschema.validate(monitor, as_json_schema(served["schema"]["openAPIV3Schema"]))


# --- the chart -----------------------------------------------------------------------------------


def test_dashboards_and_the_pod_monitor_are_off_by_default(helm):
    docs = render(helm)
    assert dashboard_config_maps(docs) == [] and pod_monitors(docs) == []


def test_the_dashboard_config_map_holds_the_dashboard_for_grafanas_sidecar(helm):
    (config_map,) = dashboard_config_maps(render(helm, "--set", "grafana.dashboards.enabled=true"))
    meta = config_map["metadata"]
    assert meta["namespace"] == "kuberl-system" and meta["name"] == "kuberl-dashboards"
    assert meta["labels"]["grafana_dashboard"] == "1"
    assert meta["labels"]["app.kubernetes.io/name"] == "kuberl" and "annotations" not in meta
    assert list(config_map["data"]) == ["kuberl.json"]
    assert config_map["data"]["kuberl.json"] == DASHBOARD.read_text().rstrip("\n")
    kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)


def test_the_sidecars_label_the_namespace_and_the_folder_are_settings(helm):
    (config_map,) = dashboard_config_maps(render(
        helm, "--set", "grafana.dashboards.enabled=true", "--set", "grafana.dashboards.label=kuberl.io/dashboard",
        "--set", "grafana.dashboards.labelValue=2", "--set", "grafana.dashboards.namespace=monitoring",
        "--set", "grafana.dashboards.annotations.grafana_folder=RL", "--set", "grafana.dashboards.labels.team=rl"))
    meta = config_map["metadata"]
    assert meta["namespace"] == "monitoring"
    assert meta["labels"]["kuberl.io/dashboard"] == "2"  # a number from --set is the label's text
    assert "grafana_dashboard" not in meta["labels"] and meta["labels"]["team"] == "rl"
    assert meta["annotations"] == {"grafana_folder": "RL"}
    kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)


def test_the_monitoring_values_lint_and_render_valid_objects(helm):
    proc = subprocess.run([str(helm), "lint", "--strict", str(CHART), *MONITORING_VALUES], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = render(helm, *MONITORING_VALUES)
    (config_map,) = dashboard_config_maps(docs)
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Reinforcement learning"}
    (monitor,) = pod_monitors(docs)
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "15s"
    validate_pod_monitor(monitor)
    for doc in docs:
        if doc["kind"] not in NOT_IN_KUBERNETES:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_crd_fixture_is_not_a_rubber_stamp(helm):
    import jsonschema

    (monitor,) = pod_monitors(render(helm, "--set", "metrics.podMonitor.enabled=true"))
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "30 seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate_pod_monitor(monitor)


SETTINGS = Settings(trainer_image="registry.example/trainer:1", operator_namespace="kuberl-system",
                    prometheus_namespace="monitoring")


def _children() -> tuple[dict[str, Any], dict[str, Any]]:
    """The head and a worker pod the operator builds for an experiment in `research` (attempt 3)."""
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "cartpole"},
           "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 1000},
                    "storage": {"uri": "s3://bucket/runs"}, "workers": {"replicas": 1}}}
    experiment, owner = resolve_experiment(validate_document(doc), SETTINGS, "research"), Owner("cartpole", "research", "u")
    return (build_head_pod(experiment, owner, 3, status_port=SETTINGS.status_port),
            build_worker_pod(experiment, owner, 0, 3, status_port=SETTINGS.status_port))


def _meta_labels(pod: dict[str, Any]) -> dict[str, str]:
    """What Prometheus' Kubernetes discovery makes of a pod's labels and annotations."""
    meta = pod["metadata"]
    return {f"__meta_kubernetes_pod_{kind}_" + re.sub(r"[^A-Za-z0-9_]", "_", key): value
            for kind, items in (("label", meta["labels"]), ("annotation", meta.get("annotations", {})))
            for key, value in items.items()}


def test_the_pod_monitor_scrapes_the_head_pods_the_operator_builds(helm):
    docs = render(helm, "--set", "metrics.podMonitor.enabled=true")
    (monitor,) = pod_monitors(docs)
    validate_pod_monitor(monitor)
    assert monitor["metadata"]["namespace"] == "kuberl-system" and monitor["spec"]["namespaceSelector"] == {"any": True}
    head, worker = _children()
    selector = monitor["spec"]["selector"]["matchLabels"].items()
    assert selector <= head["metadata"]["labels"].items()
    assert not selector <= worker["metadata"]["labels"].items()  # workers serve no /metrics
    operator_pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    assert not selector <= operator_pod["metadata"]["labels"].items()  # the operator has its ServiceMonitor
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in head["spec"]["containers"][0]["ports"]}
    assert (endpoint["path"], ports[endpoint["port"]]) == ("/metrics", SETTINGS.status_port)
    # The series get the experiment's name and the attempt: what the dashboard groups and counts restarts by.
    discovered = _meta_labels(head)
    relabeled = {r["targetLabel"]: discovered[r["sourceLabels"][0]] for r in endpoint["relabelings"]}
    assert relabeled == {"experiment": "cartpole", "attempt": "3"}


def test_the_pod_monitor_looks_only_where_the_operator_watches(helm):
    (monitor,) = pod_monitors(render(helm, "-f", str(CHART / "ci" / "namespaced-values.yaml"),
                                     "--set", "metrics.podMonitor.enabled=true"))
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["research", "team-b"]}
    validate_pod_monitor(monitor)


@pytest.mark.parametrize(("override", "field"), [
    ("grafana.dashboards.label=not a label", "/grafana/dashboards/label"),
    ("grafana.dashboards.labelValue=-1-", "/grafana/dashboards/labelValue"),
    ("grafana.dashboards.namespace=Monitoring", "/grafana/dashboards/namespace"),
    ("grafana.dashboards.folder=RL", "additional properties 'folder' not allowed"),
    ("metrics.podMonitor.interval=often", "/metrics/podMonitor/interval"),
    ("metrics.podMonitor.labels.release=1", "/metrics/podMonitor/labels/release"),
])
def test_bad_values_fail_with_the_field_named(helm, override, field):
    proc = _template(helm, ("--set", override))
    assert proc.returncode != 0 and field in proc.stderr, proc.stderr


# --- the dashboard -------------------------------------------------------------------------------


def _data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(dashboard) if p.get("targets")]


def test_the_dashboard_has_unique_ids_and_a_layout_without_overlaps():
    dashboard = load_dashboard()
    assert dashboard["uid"] == "kuberl-experiments" and dashboard["title"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{panel['title']!r} overlaps another panel"
        taken |= cells


def test_every_query_reads_the_chosen_datasource_and_defined_variables():
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in _data_panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]
    for name in ("namespace", "experiment"):
        assert variables[name]["datasource"] == DATASOURCE and variables[name]["includeAll"]
    for where, expr in queries(dashboard):
        assert variables_used(expr) <= set(variables) | GRAFANA_VARIABLES, where


def test_every_trainer_query_is_scoped_to_the_chosen_experiments_and_the_operators_are_not():
    for where, expr in queries(load_dashboard()):
        if where.startswith("variable"):
            continue
        for name in metric_names(expr):
            selectors = re.findall(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?", expr)
            if name.startswith("kuberl_operator_"):  # the operator's series have no experiment label
                assert all("experiment" not in s for s in selectors), where
            else:
                assert selectors and all(all(m in s for m in SCOPE) for s in selectors), f"{where}: {name}"


def test_the_dashboard_shows_what_an_rl_user_watches():
    queried = {name for _, expr in queries(load_dashboard()) for name in metric_names(expr)}
    assert {
        "kuberl_episode_return_mean", "kuberl_evaluation_return_mean", "kuberl_env_steps_per_second",
        "kuberl_learner_updates_total", "kuberl_replay_size", "kuberl_checkpoint_duration_seconds_count",
        "kuberl_training_iteration",  # restarts: head pods (attempts) seen
        "kuberl_operator_reconciles_total", "kuberl_operator_reconcile_duration_seconds_bucket",
        "kuberl_operator_experiments",
    } <= queried
    titles = {p["title"] for p in panels(load_dashboard())}
    assert {"Episode return", "Evaluation return", "Env steps / s", "Learner updates / s", "Replay fill",
            "Policy lag", "Time since last checkpoint", "Head restarts", "Reconciles / s"} <= titles


# --- the tokenizer -------------------------------------------------------------------------------


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (namespace, le) (rate(a_bucket{x="y", experiment=~"$experiment"}[$__rate_interval]))', {"a_bucket"}),
    ("max by (n) (a{b=\"}{\"} and (c_total{} > 0))", {"a", "c_total"}),
    ("time() - max(max_over_time((timestamp(increase(d_count[5m]) > 0))[$__range:30s]))", {"d_count"}),
    ("histogram_quantile(0.95, sum without (pod) (rate(e_bucket[1m]))) offset 1h30m", {"e_bucket"}),
    ("f * on (instance) group_left (pod, node) g unless h offset -5m", {"f", "g", "h"}),
    ("count by (x) (max_over_time(i[1d])) - 1e3 + inf", {"i"}),
    ('{__name__="j", job="k"} / ignoring(le) l:recorded:rate5m @ start()', {"j", "l:recorded:rate5m"}),
    ("sum(rate(m[${__rate_interval}])) by (le)", {"m"}),
])
def test_the_tokenizer_finds_the_metric_names_and_nothing_else(expr, names):
    assert metric_names(expr) == names


@pytest.mark.parametrize(("query", "expr"), [
    ('label_values(a{ns=~"$namespace"}, experiment)', 'a{ns=~"$namespace"}'),
    ("label_values(namespace)", None),
    ({"query": "query_result(max by (x, y) (b))", "refId": "r"}, "max by (x, y) (b)"),
])
def test_variable_queries_give_their_promql(query, expr):
    assert variable_query({"type": "query", "name": "v", "query": query}) == expr
