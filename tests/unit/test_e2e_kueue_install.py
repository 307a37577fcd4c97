"""The kind e2e's Kueue install: the release's manifests with the `pod` integration turned on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

SCRIPT = Path(__file__).resolve().parents[2] / "e2e" / "kind" / "kueue_pod_integration.py"


def _module():
    spec = importlib.util.spec_from_file_location("kueue_pod_integration", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pod_integration_is_added_and_the_rest_kept(tmp_path):
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
              "managedJobsNamespaceSelector": {"matchExpressions": [
                  {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]},
              "integrations": {"frameworks": ["batch/job", "kubeflow.org/mpijob"]}}
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config"},
             "data": {"controller_manager_config.yaml": yaml.safe_dump(config)}}]
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    _module().main(str(path))
    namespace, config_map = yaml.safe_load_all(path.read_text())
    assert namespace == docs[0]
    edited = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert edited["integrations"]["frameworks"] == ["batch/job", "kubeflow.org/mpijob", "pod"]
    assert edited["managedJobsNamespaceSelector"] == config["managedJobsNamespaceSelector"]
    _module().main(str(path))  # idempotent
    _, again = yaml.safe_load_all(path.read_text())
    assert yaml.safe_load(again["data"]["controller_manager_config.yaml"])["integrations"]["frameworks"].count("pod") == 1
