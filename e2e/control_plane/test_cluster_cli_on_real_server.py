"""`kuberl submit | list | status | delete` against a real kube-apiserver 1.20, as a user with a client
certificate of their own: RBAC refuses them until the built-in `edit` role (to which the chart
aggregates rlexperiments and rlsweeps) is bound in the namespace; then the operator takes the experiment,
its Events show in `kuberl status`, and `kuberl delete` leaves the garbage collector the children. A sweep
the same way: listed beside the experiments, its trials in `kuberl status sweep/NAME`, and deleted with
them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from controlplanecluster import ControlPlaneCluster
from experiments import Experiments, tiny_ppo, unique_name
from kubernetes import client as k8s

from kuberl.client import Client


def _kuberl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "KUBECONFIG": str(kubeconfig)})


def test_a_user_submits_lists_watches_and_deletes_with_their_own_rbac(
        cluster: ControlPlaneCluster, experiments: Experiments, tmp_path: Path) -> None:
    assert cluster.plane is not None
    user = unique_name("researcher")
    kubeconfig = cluster.plane.kubeconfig_for(user)
    ns = cluster.namespace
    name = unique_name("cli")
    manifest = tmp_path / "experiment.yaml"
    manifest.write_text(yaml.safe_dump(tiny_ppo(name, cluster, stop={"timesteps": 100_000})))

    refused = _kuberl(kubeconfig, "list", "-n", ns)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "forbidden" in refused.stderr and user in refused.stderr and f"namespace '{ns}'" in refused.stderr

    k8s.RbacAuthorizationV1Api(cluster.api_client).create_namespaced_role_binding(ns, {
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})

    submitted = _kuberl(kubeconfig, "submit", "-f", str(manifest))
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.strip() == f"rlexperiment.kuberl.io/{name} created in namespace {ns}"
    client = Client(str(kubeconfig))
    assert client.namespace == "default"  # the certificate's kubeconfig names no namespace
    running = client.wait(name, namespace=ns, phases={"Running", "Succeeded", "Failed"}, timeout=300)
    assert running["status"]["phase"] == "Running", experiments.explain(name)

    listed = _kuberl(kubeconfig, "list", "experiments", "-n", ns)
    assert any(line.split()[:3] == [name, "Running", "ppo"] for line in listed.stdout.splitlines()), listed.stdout
    status = _kuberl(kubeconfig, "status", name, "-n", ns, "-o", "yaml")
    assert status.returncode == 0, status.stderr
    document = yaml.safe_load(status.stdout)
    assert document["status"]["phase"] == "Running" and document["status"]["attempt"] == 1
    assert any(e["message"].startswith("Running") for e in document["events"]), document["events"]  # the operator's

    deleted = _kuberl(kubeconfig, "delete", name, "-n", ns, "--wait", "--timeout", "120")
    assert deleted.returncode == 0, deleted.stderr
    experiments.wait(name, lambda: not experiments.pods(name), "the garbage collector to remove the pods", timeout=120)
    gone = _kuberl(kubeconfig, "status", name, "-n", ns)
    assert gone.returncode == 2
    assert gone.stderr.strip() == f"error: rlexperiment or rlsweep {name!r} not found in namespace {ns!r}"

    _a_sweep_is_listed_shown_and_deleted_with_its_trials(cluster, experiments, kubeconfig, tmp_path)


def _a_sweep_is_listed_shown_and_deleted_with_its_trials(cluster: ControlPlaneCluster, experiments: Experiments,
                                                         kubeconfig: Path, tmp_path: Path) -> None:
    ns, name = cluster.namespace, unique_name("sw")
    template = tiny_ppo("template", cluster, stop={"timesteps": 100_000})["spec"]
    manifest = tmp_path / "sweep.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": name},
        "spec": {"template": template, "maxTrials": 2, "parallelism": 1, "search": {"algorithm": "random", "seed": 1},
                 "parameters": [{"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.001}]}}))
    submitted = _kuberl(kubeconfig, "submit", "-f", str(manifest), "-n", ns)
    assert submitted.returncode == 0, submitted.stderr
    trial = f"{name}-t000"
    experiments.wait(trial, lambda: experiments.get(trial), "the operator to create the sweep's first trial", timeout=120)
    client = Client(str(kubeconfig), namespace=ns)
    experiments.wait(trial, lambda: (client.get_sweep(name).get("status") or {}).get("trials"),
                     "the sweep's status to record its first trial", timeout=120)

    listed = _kuberl(kubeconfig, "list", "-n", ns)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line and not line.startswith("NAME")]
    assert f"rlsweep.kuberl.io/{name}" in names and f"rlexperiment.kuberl.io/{trial}" in names, listed.stdout
    status = _kuberl(kubeconfig, "status", f"sweep/{name}", "-n", ns)
    assert status.returncode == 0, status.stderr
    rows = status.stdout.split("All trials:\n")[1].splitlines()
    assert rows[1].split()[:2] == ["0", trial] and rows[0].split()[4] == "config.lr", status.stdout

    deleted = _kuberl(kubeconfig, "delete", name, "-n", ns, "--wait", "--timeout", "120")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines()[0] == f"rlsweep.kuberl.io/{name} deleted from namespace {ns}"
    experiments.wait(trial, lambda: experiments.get(trial) is None, "the garbage collector to remove the trials",
                     timeout=120)
