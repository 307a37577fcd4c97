"""The project's CRD and an example experiment on a real kube-apiserver 1.20: what the API emulator
cannot show (the schema as the server stores it, subresources, the empty-string validation fix in
the build, TokenRequest and RBAC, the garbage collector)."""

from __future__ import annotations

import copy
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from paths import CRD_FILE, EXAMPLE, NAMESPACE

from kuberl_testing.controlplane import ControlPlane
from kuberl_testing.podrunner import api_client_from_kubeconfig

GROUP, VERSION, PLURAL = "kuberl.io", "v1alpha1", "rlexperiments"

Kubectl = Callable[..., str]


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def test_server_stores_the_generated_crd_unchanged(crd_applied: dict[str, Any]) -> None:
    generated = _load(CRD_FILE)["spec"]
    stored = crd_applied["spec"]
    assert [v["name"] for v in stored["versions"]] == [v["name"] for v in generated["versions"]]
    for ours, theirs in zip(generated["versions"], stored["versions"], strict=True):
        # a keyword the server does not know would be pruned from the stored schema
        assert theirs["schema"] == ours["schema"]
        assert theirs["subresources"] == ours["subresources"]
        assert theirs.get("additionalPrinterColumns", []) == ours.get("additionalPrinterColumns", [])
    assert stored["names"] == generated["names"]
    conditions = {c["type"]: c["status"] for c in crd_applied["status"]["conditions"]}
    assert (conditions["NamesAccepted"], conditions["Established"]) == ("True", "True")


def test_example_experiment_reads_back_as_written(crd_applied: dict[str, Any], kubectl: Kubectl) -> None:
    kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE))
    stored = json.loads(kubectl("get", "rlexperiment", "cartpole-ppo", "-n", NAMESPACE, "-o", "json"))
    assert stored["spec"] == _load(EXAMPLE)["spec"]  # nothing pruned, nothing defaulted
    assert stored["metadata"]["generation"] == 1


def test_status_subresource_accepts_empty_strings(crd_applied: dict[str, Any], kubectl: Kubectl) -> None:
    """Refused by an unpatched 1.20 built with Go 1.16+ ("" read as null, kubernetes issue 99804)."""
    kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE))
    condition = {"type": "Ready", "status": "False", "reason": "Pending", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    kubectl("patch", "rlexperiment", "cartpole-ppo", "-n", NAMESPACE, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"phase": "Pending", "conditions": [condition]}}))
    stored = json.loads(kubectl("get", "rlexperiment", "cartpole-ppo", "-n", NAMESPACE, "-o", "json"))
    assert stored["status"]["conditions"] == [condition]
    assert stored["metadata"]["generation"] == 1  # a status write is not a spec change


def _as_token(plane: ControlPlane, token: str, path: str) -> tuple[int, dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(plane.work_dir / "pki" / "ca.crt"))
    request = urllib.request.Request(plane.server + path, headers={"Authorization": f"Bearer {token}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_token_request_gives_a_service_account_rbac_then_allows(
        control_plane: ControlPlane, crd_applied: dict[str, Any], kubectl: Kubectl) -> None:
    kubectl("create", "serviceaccount", "reader", "-n", NAMESPACE)
    token = kubectl("create", "token", "reader", "-n", NAMESPACE, "--duration=10m").strip()
    path = f"/apis/kuberl.io/v1alpha1/namespaces/{NAMESPACE}/rlexperiments"
    status, body = _as_token(control_plane, token, path)
    assert status == 403, body  # authenticated (not 401), and RBAC grants nothing yet
    assert f"system:serviceaccount:{NAMESPACE}:reader" in body["message"]
    kubectl("create", "role", "read-experiments", "-n", NAMESPACE, "--verb=list", "--resource=rlexperiments.kuberl.io")
    kubectl("create", "rolebinding", "reader", "-n", NAMESPACE, "--role=read-experiments",
            f"--serviceaccount={NAMESPACE}:reader")
    deadline = time.monotonic() + 30  # the RBAC authorizer reads roles from its informer cache
    while (status := _as_token(control_plane, token, path)[0]) == 403 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 200


def test_garbage_collector_removes_an_owned_child(crd_applied: dict[str, Any], kubectl: Kubectl) -> None:
    kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE))
    owner = json.loads(kubectl("get", "rlexperiment", "cartpole-ppo", "-n", NAMESPACE, "-o", "json"))["metadata"]
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "cartpole-ppo-child", "namespace": NAMESPACE, "ownerReferences": [{
            "apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "name": owner["name"], "uid": owner["uid"],
            "controller": True, "blockOwnerDeletion": True}]}}
    kubectl("create", "-f", "-", stdin=json.dumps(child))
    kubectl("delete", "rlexperiment", "cartpole-ppo", "-n", NAMESPACE, "--wait=true")
    deadline = time.monotonic() + 60
    while kubectl("get", "configmap", "-n", NAMESPACE, "--ignore-not-found", "-o", "name").count("cartpole-ppo-child"):
        assert time.monotonic() < deadline, "the garbage collector left the experiment's ConfigMap"
        time.sleep(0.2)


def _custom(plane: ControlPlane) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api_client_from_kubeconfig(str(plane.kubeconfig)))


def _example(name: str) -> dict[str, Any]:
    manifest = _load(EXAMPLE)
    manifest["metadata"] = {"name": name, "namespace": NAMESPACE}
    return manifest


def test_the_server_prunes_unknown_fields_but_keeps_the_open_maps(
        control_plane: ControlPlane, crd_applied: dict[str, Any]) -> None:
    """Sent without kubectl's client-side checks, an unknown field is dropped by the structural
    schema (not refused); env.config and config keep whatever they hold."""
    custom = _custom(control_plane)
    manifest = _example("pruned")
    manifest["spec"]["bogus"] = 1
    manifest["spec"].setdefault("rollouts", {})["workerz"] = 2  # the example may leave rollouts to the defaults
    manifest["spec"]["env"]["config"] = {"anything": {"nested": [1, 2]}}
    manifest["spec"]["config"] = {**manifest["spec"].get("config", {}), "notAHyperparameter": True}
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, manifest)
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "pruned")
    assert "bogus" not in stored["spec"] and "workerz" not in stored["spec"]["rollouts"]
    assert stored["spec"]["env"]["config"] == {"anything": {"nested": [1, 2]}}
    assert stored["spec"]["config"]["notAHyperparameter"] is True

    stored["status"] = {"phase": "Pending", "bogusStatus": "x"}
    written = custom.replace_namespaced_custom_object_status(GROUP, VERSION, NAMESPACE, PLURAL, "pruned", stored)
    assert written["status"] == {"phase": "Pending"}


def test_status_and_scale_writes_with_a_stale_resource_version_conflict(
        control_plane: ControlPlane, crd_applied: dict[str, Any]) -> None:
    custom = _custom(control_plane)
    manifest = _example("conflicts")
    manifest["spec"]["workers"] = {"replicas": 1}
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, manifest)
    read = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts")
    stale = copy.deepcopy(read)

    read["status"] = {"phase": "Running", "workers": 1, "selector": "kuberl.io/experiment=conflicts"}
    written = custom.replace_namespaced_custom_object_status(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts", read)
    assert written["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    assert written["metadata"]["generation"] == stale["metadata"]["generation"]  # status is not spec
    stale["status"] = {"phase": "Failed"}
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object_status(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts", stale)
    assert conflict.value.status == 409, conflict.value.body

    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts")
    assert scale["spec"]["replicas"] == 1
    assert scale["status"] == {"replicas": 1, "selector": "kuberl.io/experiment=conflicts"}
    stale_scale = copy.deepcopy(scale)
    scale["spec"]["replicas"] = 3
    custom.replace_namespaced_custom_object_scale(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts", scale)
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts")
    assert stored["spec"]["workers"]["replicas"] == 3
    assert stored["metadata"]["generation"] == written["metadata"]["generation"] + 1
    assert stored["status"]["phase"] == "Running"  # a scale write leaves status alone
    stale_scale["spec"]["replicas"] = 5
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object_scale(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts", stale_scale)
    assert conflict.value.status == 409, conflict.value.body
    assert custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "conflicts")[
        "spec"]["workers"]["replicas"] == 3
