"""RBAC least privilege: the (resource, verb) pairs the operator really uses equal what the chart grants.

The operator runs exactly as the chart's Deployment starts it (command, args and env from `helm
template`, the chart's peering objects), in each RBAC mode, against the API emulator in this process.
A recorder on the emulator notes every request made with the operator's credentials while the test
(with its own token) drives a full lifecycle: secret lookup, children, a lost worker, a spec change,
a failed head and its restart, success, an invalid spec, deletion. The pairs must equal the chart's
rules for that mode, no more (least privilege) and no fewer (nothing forbidden at run time); every
call in kuberl/operator/cluster.py must be among them, so the lifecycle missed none. A namespaced
install renders no ClusterRole or ClusterRoleBinding at all.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kuberl_testing.apiserver import EmulatorThread, KubeApiEmulator, resource_target, write_kubeconfig
from kuberl_testing.fault_figures import report_figures
from kuberl_testing.helm_chart import RELEASE_NAMESPACE, render
from kuberl_testing.operator_harness import experiment_body, wait_for
from kuberl_testing.ports import free_port
from kuberl_testing.process_tree import reap, stop_gracefully

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WATCHED = "research"
TEST_TOKEN = "rbac-test-client"
MODES = {
    "cluster": ["rbac.scope=cluster"],
    "cluster-named-namespaces": ["rbac.scope=cluster", f"rbac.watchNamespaces[0]={WATCHED}"],
    "namespaced": ["rbac.scope=namespaced", f"rbac.watchNamespaces[0]={WATCHED}"],
}
Pair = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
# Checked by an admission plugin (OwnerReferencesPermissionEnforcement) when a child's ownerReference sets
# blockOwnerDeletion, never sent as a request: the real control plane's e2e runs with that plugin on.
ADMISSION_CHECKED: set[Pair] = {("kuberl.io", "rlexperiments/finalizers", "update")}




def granted(docs: list[dict[str, Any]], kind: str) -> set[Pair]:
    return {(g, r, v) for d in docs if d["kind"] == kind for rule in d["rules"]
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


CLUSTER_PY = ROOT / "src" / "kuberl" / "operator" / "cluster.py"
_CALL = r"\.(create|read|get|list|patch|delete|replace)_namespaced_(\w+?)\b"


def pod_group_verbs() -> set[str]:
    """The verbs of cluster.py's PodGroup calls (gang scheduling only; the chart grants them per scheduler)."""
    lines = [line for line in CLUSTER_PY.read_text().splitlines() if "POD_GROUPS" in line]
    return {{"read": "get"}.get(verb, verb) for line in lines for verb, _ in re.findall(_CALL, line)}


def test_the_chart_grants_the_pod_group_verbs_the_operator_uses():
    assert pod_group_verbs() == {"get", "create", "patch"}  # as charts/kuberl's rbac.gangSchedulers grants


def cluster_py_pairs() -> set[Pair]:
    """The (group, resource, verb) of every kubernetes client call in kuberl/operator/cluster.py but the
    PodGroup ones (a gang-scheduled experiment's, which no plain lifecycle makes)."""
    source = "\n".join(line for line in CLUSTER_PY.read_text().splitlines() if "POD_GROUPS" not in line)
    verbs = {"create": "create", "read": "get", "get": "get", "list": "list", "patch": "patch", "delete": "delete",
             "replace": "update"}
    resources = {"pod": ("", "pods"), "service": ("", "services"), "config_map": ("", "configmaps"),
                 "secret": ("", "secrets"), "event": ("", "events"),
                 "network_policy": ("networking.k8s.io", "networkpolicies"),
                 "custom_object": ("kuberl.io", "rlexperiments"),
                 "custom_object_status": ("kuberl.io", "rlexperiments/status")}
    pairs = set()
    for verb, resource in re.findall(_CALL, source):
        group, plural = resources[resource]
        pairs.add((group, plural, verbs[verb]))
    return pairs


class RequestRecorder:
    """Every resource request the operator makes (any token but the test's), as RBAC sees it."""

    def __init__(self) -> None:
        self.pairs: set[Pair] = set()
        self.pod_selectors: set[str] = set()  # the labelSelector of every pod list and watch
        self.enabled = True

    def wrap(self, original: Any) -> Any:
        recorder = self

        async def recording(emulator: KubeApiEmulator, raw_request: Any) -> Any:
            target = resource_target(raw_request.path)
            if recorder.enabled and target and raw_request.headers.get("Authorization") != f"Bearer {TEST_TOKEN}":
                group, plural, _, name, sub = target
                method = raw_request.method.upper()
                if raw_request.query.get("watch", "").lower() in ("true", "1"):
                    verb = "watch"
                elif method == "GET":
                    verb = "get" if name else "list"
                else:
                    verb = {"POST": "create", "PATCH": "patch", "PUT": "update",
                            "DELETE": "delete" if name else "deletecollection"}[method]
                recorder.pairs.add((group, f"{plural}/{sub}" if sub else plural, verb))
                if plural == "pods" and verb in ("list", "watch"):
                    recorder.pod_selectors.add(raw_request.query.get("labelSelector", ""))
            return await original(emulator, raw_request)

        return recording


def test_every_cluster_py_call_is_recognised():
    pairs = cluster_py_pairs()
    assert ("", "pods", "create") in pairs and ("kuberl.io", "rlexperiments/status", "patch") in pairs
    assert len(pairs) >= 10


def test_a_namespaced_install_renders_nothing_cluster_wide():
    docs = render(*MODES["namespaced"])
    assert [d["metadata"]["name"] for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")] == []
    roles = [d for d in docs if d["kind"] == "Role"]
    assert [r["metadata"]["namespace"] for r in roles] == [WATCHED]


class Lifecycle:
    """The test's own client (its own token, so the recorder ignores it) and the kubelet's part."""

    def __init__(self, url: str):
        configuration = kubernetes.client.Configuration(host=url)
        configuration.api_key = {"BearerToken": TEST_TOKEN}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        api = kubernetes.client.ApiClient(configuration)
        self.core, self.custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)

    def pods(self) -> dict[str, dict[str, Any]]:
        items = json.loads(self.core.list_namespaced_pod(WATCHED, _preload_content=False).data)["items"]
        return {p["metadata"]["name"]: p for p in items}

    def experiment(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object("kuberl.io", "v1alpha1", WATCHED, "rlexperiments", name)

    def phase(self, name: str) -> str | None:
        return (self.experiment(name).get("status") or {}).get("phase")

    def pod_status(self, name: str, phase: str, exit_code: int | None = None, message: str = "") -> None:
        state = ({"terminated": {"exitCode": exit_code, "message": message}} if exit_code is not None
                 else {"running": {"startedAt": "2026-01-01T00:00:00Z"}})
        status = {"phase": phase, "podIP": "127.0.0.250",
                  "containerStatuses": [{"name": "main", "state": state, "ready": phase == "Running",
                                         "restartCount": 0, "image": "x", "imageID": ""}]}
        self.core.patch_namespaced_pod_status(name, WATCHED, {"status": status}, _preload_content=False,
                                              _content_type="application/merge-patch+json")

    def run(self) -> None:
        self.core.create_namespaced_secret(WATCHED, {"metadata": {"name": "s3-credentials"}, "data": {
            k: base64.b64encode(b"x").decode() for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}})
        body = experiment_body("full", workers={"replicas": 1}, backoffLimit=2,
                               storage={"uri": "s3://bucket/runs", "secretRef": {"name": "s3-credentials"}})
        self.custom.create_namespaced_custom_object("kuberl.io", "v1alpha1", WATCHED, "rlexperiments", body)
        wait_for(lambda: {"full-head", "full-worker-0"} <= set(self.pods()), timeout=60, what="head and worker")
        first_worker = self.pods()["full-worker-0"]["metadata"]["uid"]
        self.pod_status("full-head", "Running")
        self.pod_status("full-worker-0", "Failed", exit_code=137, message="OOMKilled")
        wait_for(lambda: self.pods().get("full-worker-0", {}).get("metadata", {}).get("uid") not in (None, first_worker),
                 timeout=30, what="the lost worker recreated")
        self.custom.patch_namespaced_custom_object("kuberl.io", "v1alpha1", WATCHED, "rlexperiments", "full",
                                                   {"spec": {"backoffLimit": 3}})
        wait_for(lambda: "backoffLimit: 3" in self.core.read_namespaced_config_map("full-config", WATCHED)
                 .data["experiment.yaml"], timeout=30, what="the ConfigMap follows a mutable spec change")
        self.pod_status("full-head", "Failed", exit_code=1, message="ray died")
        wait_for(lambda: self.pods().get("full-head", {}).get("metadata", {}).get("annotations", {})
                 .get("kuberl.io/attempt") == "2", timeout=30, what="head attempt 2")
        summary = json.dumps({"result": "Succeeded", "reason": "StopCriterion", "message": "done", "iteration": 1})
        self.pod_status("full-head", "Succeeded", exit_code=0, message=summary)
        wait_for(lambda: self.phase("full") == "Succeeded", timeout=30, what="Succeeded")
        wait_for(lambda: "full-worker-0" not in self.pods(), timeout=30, what="workers deleted")
        self.custom.create_namespaced_custom_object("kuberl.io", "v1alpha1", WATCHED, "rlexperiments",
                                                    experiment_body("bad", rollouts={"workers": -1}))
        wait_for(lambda: self.phase("bad") == "Failed", timeout=30, what="invalid spec refused")
        events = json.loads(self.core.list_namespaced_event(WATCHED, _preload_content=False).data)["items"]
        assert {"InvalidSpec", "HeadCreated"} <= {e["reason"] for e in events}
        self._sweep()
        self.custom.delete_namespaced_custom_object("kuberl.io", "v1alpha1", WATCHED, "rlexperiments", "full")
        wait_for(lambda: "full" not in [o["metadata"]["name"] for o in self.custom.list_namespaced_custom_object(
            "kuberl.io", "v1alpha1", WATCHED, "rlexperiments")["items"]], timeout=30, what="deleted")


    def _sweep(self) -> None:
        """An RLSweep: the operator records its trial in the sweep's status and creates the RLExperiment."""
        template = experiment_body("t", workers={"replicas": 0})["spec"]
        sweep = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": "sw"},
                 "spec": {"template": template, "maxTrials": 1, "search": {"algorithm": "random", "seed": 1},
                          "parameters": [{"path": "config.lr", "type": "float", "low": 0.001, "high": 0.002}]}}
        self.custom.create_namespaced_custom_object("kuberl.io", "v1alpha1", WATCHED, "rlsweeps", sweep)
        wait_for(lambda: "sw-t000-head" in self.pods(), timeout=60, what="the sweep's trial and its head pod")
        self.custom.delete_namespaced_custom_object("kuberl.io", "v1alpha1", WATCHED, "rlsweeps", "sw")
        wait_for(lambda: "sw-t000" not in [o["metadata"]["name"] for o in self.custom.list_namespaced_custom_object(
            "kuberl.io", "v1alpha1", WATCHED, "rlexperiments")["items"]], timeout=90, what="the trial deleted")


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    # The one fieldRef is metadata.namespace: the release's namespace.
    return {var["name"]: var.get("value", RELEASE_NAMESPACE) for var in container["env"]}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_operator_uses_exactly_what_the_chart_grants(mode, tmp_path, monkeypatch):
    docs = render(*MODES[mode], "rbac.aggregateToDefaultRoles=false", "operator.statusPollSeconds=1",
                  f"metrics.port={free_port()}", f"operator.healthPort={free_port()}")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    recorder = RequestRecorder()
    monkeypatch.setattr(KubeApiEmulator, "__call__", recorder.wrap(KubeApiEmulator.__call__))
    with EmulatorThread() as emulator:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emulator.url)
        lifecycle = Lifecycle(emulator.url)
        for peering in (d for d in docs if d["kind"] in ("KopfPeering", "ClusterKopfPeering")):
            namespace = peering["metadata"].get("namespace")
            if namespace:
                lifecycle.custom.create_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", peering)
            else:
                lifecycle.custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", peering)
        command = [str(BIN / container["command"][0]), *container["command"][1:], *container["args"]]
        env = {**os.environ, **_container_env(container), "KUBECONFIG": str(kubeconfig),
               "KUBERL_LISTEN_HOST": "127.0.0.1"}
        log_path = tmp_path / "operator.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                lifecycle.run()
                assert stop_gracefully(proc) == 0
            finally:
                reap(proc)
        recorder.enabled = False
    used = recorder.pairs
    assert cluster_py_pairs() <= used, f"the lifecycle missed operator calls: {cluster_py_pairs() - used}"
    grants = granted(docs, "Role") if mode == "namespaced" else granted(docs, "ClusterRole")
    assert not any("*" in pair for pair in grants)
    assert grants >= ADMISSION_CHECKED
    grants -= ADMISSION_CHECKED
    assert used == grants, (f"used but not granted: {sorted(used - grants)}; "
                            f"granted but unused: {sorted(grants - used)}")
    # the API server filters every pod list and watch: the operator never receives pods other than kuberl's
    assert recorder.pod_selectors and all(s.startswith("app.kubernetes.io/name=kuberl,") for s in recorder.pod_selectors)
    assert "Traceback" not in log_path.read_text()
    assert "permission" not in log_path.read_text().lower()
    report_figures(f"RBAC {mode} mode", pairs_used=len(used), pairs_granted=len(grants),
                   cluster_roles=sum(d["kind"] == "ClusterRole" for d in docs))
