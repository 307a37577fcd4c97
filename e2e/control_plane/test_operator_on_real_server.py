"""The operator against a real kube-apiserver 1.20, on its ServiceAccount's token: what the API
emulator cannot show (admission refusing pods, ResourceQuota, the garbage collector, the Events a
reconcile posts whichever path starts it)."""

from __future__ import annotations

import json
import time
from typing import Any

import yaml
from controlplanecluster import ControlPlaneCluster
from experiments import EXPERIMENT_LABEL, Experiments, tiny_ppo, unique_name
from kubernetes import client as k8s

GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
CHILD_RESOURCES = {"pods": "Pod", "services": "Service", "configmaps": "ConfigMap", "secrets": "Secret",
                   "networkpolicies": "NetworkPolicy"}


def _namespace(cluster: ControlPlaneCluster, experiments: Experiments, prefix: str) -> str:
    """A namespace of its own (with the S3 Secret), so a quota or a missing account stays in it."""
    name = unique_name(prefix)
    core = experiments.core
    core.create_namespace({"metadata": {"name": name}})
    secret = core.read_namespaced_secret(cluster.s3_secret, cluster.namespace)
    core.create_namespaced_secret(name, {"metadata": {"name": cluster.s3_secret}, "data": secret.data})
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.2)
    experiments.namespace = name
    return name


def test_the_operator_holds_only_its_service_account_token(cluster: ControlPlaneCluster, api: k8s.ApiClient) -> None:
    config = yaml.safe_load(cluster.operator_kubeconfig.read_text())
    (user,) = config["users"]
    assert set(user["user"]) == {"token"}  # no client certificate, nothing of the admin's
    review = k8s.AuthenticationV1Api(api).create_token_review({"spec": {"token": user["user"]["token"]}})
    assert review.status.authenticated and review.status.user.username == cluster.operator_user
    access = k8s.AuthorizationV1Api(api).create_subject_access_review({"spec": {
        "user": cluster.operator_user, "groups": review.status.user.groups,
        "resourceAttributes": {"verb": "list", "resource": "secrets"}}})
    assert not access.status.allowed  # the chart grants get and create on Secrets, not list


def test_every_child_is_owned_and_collected_by_the_garbage_collector(
        cluster: ControlPlaneCluster, experiments: Experiments) -> None:
    name = unique_name("owned")
    experiments.apply(tiny_ppo(name, cluster, stop={"timesteps": 1_000_000}))
    experiments.wait(name, lambda: experiments.running_pod(name, "head"), "the head pod to run")
    uid = experiments.get(name)["metadata"]["uid"]
    children = experiments.child_uids(name)
    assert all(children.values()), children
    for resource, kind in CHILD_RESOURCES.items():
        for child in children[resource]:
            body = json.loads(cluster.kubectl("get", resource, child, "-n", cluster.namespace, "-o", "json").stdout)
            (owner,) = body["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) \
                == ("RLExperiment", name, uid, True, True), (kind, child, owner)
            assert body["metadata"]["labels"][EXPERIMENT_LABEL] == name

    experiments.custom.delete_namespaced_custom_object("kuberl.io", "v1alpha1", cluster.namespace, "rlexperiments",
                                                       name, propagation_policy="Background")
    experiments.wait(name, lambda: not any(experiments.children(name).values()), "every child to be gone", timeout=90)
    for resource, names in children.items():
        collected = {e["objectRef"]["name"] for e in cluster.audit(user=GARBAGE_COLLECTOR, verb="delete",
                                                                   resource=resource, namespace=cluster.namespace)}
        assert set(names) <= collected, (resource, set(names) - collected)


def test_a_missing_service_account_or_priority_class_fails_the_experiment_naming_it(
        cluster: ControlPlaneCluster, experiments: Experiments) -> None:
    namespace = _namespace(cluster, experiments, "refused")
    no_account, no_class = unique_name("no-account"), unique_name("no-class")
    experiments.apply(tiny_ppo(no_account, cluster, serviceAccountName="trainer-missing") | {
        "metadata": {"name": no_account, "namespace": namespace}})
    experiments.apply(tiny_ppo(no_class, cluster, priorityClassName="rl-missing") | {
        "metadata": {"name": no_class, "namespace": namespace}})
    for name, missing in ((no_account, 'serviceaccount "trainer-missing" not found'),
                          (no_class, "no PriorityClass with name rl-missing was found")):
        status = experiments.wait_phase(name, "Failed", timeout=60)
        stalled = experiments.condition(name, "Stalled")
        assert stalled.get("reason") == "CreateRejected", status
        assert missing in stalled.get("message", ""), stalled
        assert experiments.pods(name) == []
        assert any(e.reason == "CreateRejected" for e in experiments.events(name))


def _waiting_on_quota(experiments: Experiments, name: str) -> dict[str, Any] | None:
    conditions = experiments.status(name).get("conditions") or []
    return next((c for c in conditions if c.get("reason") == "QuotaExceeded" and c.get("status") == "True"), None)


def test_a_quota_that_forbids_the_head_pod_says_why_and_backs_off(
        cluster: ControlPlaneCluster, experiments: Experiments) -> None:
    namespace = _namespace(cluster, experiments, "quota")
    core = experiments.core
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    experiments.wait("no-pods", lambda: (core.read_namespaced_resource_quota("no-pods", namespace).status.hard or {}),
                     "the quota controller to count the namespace", timeout=60)
    name = unique_name("quota")
    experiments.apply(tiny_ppo(name, cluster) | {"metadata": {"name": name, "namespace": namespace}})

    condition = experiments.wait(name, lambda: _waiting_on_quota(experiments, name), "a QuotaExceeded condition",
                                 timeout=60)
    assert "exceeded quota: no-pods" in condition["message"], condition
    assert experiments.status(name)["phase"] == "Pending"
    experiments.wait(name, lambda: [e for e in experiments.events(name)
                                    if e.type == "Warning" and e.reason == "QuotaExceeded"
                                    and "exceeded quota: no-pods" in (e.message or "")],
                     "a QuotaExceeded Warning event", timeout=30)

    def attempts() -> int:
        return len(cluster.audit(user=cluster.operator_user, verb="create", resource="pods", namespace=namespace))

    before = attempts()
    time.sleep(20)  # the window observed: a slower operator only tries less often in it
    tried = attempts() - before
    # Backing off (2, 4, 8, 16 s ...) tries at most 4 times in 20 s; the poll loop alone would try
    # every KUBERL_STATUS_POLL_SECONDS (1 s here).
    assert tried <= 4, f"{tried} pod creations in 20 s while the quota forbids them"
    # ...and it does try again: a retry, however late (the backoff may have grown to 32 s or more by now).
    experiments.wait(name, lambda: attempts() > before, "a retry of the head pod's creation (a hang guard)",
                     timeout=180)
    assert len([e for e in experiments.events(name) if e.reason == "QuotaExceeded"]) == 1  # said once

    core.delete_namespaced_resource_quota("no-pods", namespace)
    experiments.wait(name, lambda: experiments.pods(name, "head"), "the head pod once the quota is gone", timeout=90)
    experiments.wait(name, lambda: not _waiting_on_quota(experiments, name), "the QuotaExceeded condition to clear",
                     timeout=30)
    experiments.delete(name)
