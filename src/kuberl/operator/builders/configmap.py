"""ConfigMap NAME-config: the resolved spec as experiment.yaml, mounted at /etc/kuberl in the head pod."""

from __future__ import annotations

from typing import Any

from kuberl.api.defaults import SET_FIELDS_ANNOTATION, spec_fields_set
from kuberl.api.types import RLExperiment
from kuberl.api.yaml_text import dump_yaml
from kuberl.operator import names
from kuberl.operator.builders.common import Owner, metadata

EXPERIMENT_FILE = "experiment.yaml"


def experiment_yaml(experiment: RLExperiment) -> str:
    """The manifest the trainer reads: apiVersion, kind, name/namespace and the resolved spec."""
    doc = {
        "apiVersion": experiment.api_version,
        "kind": experiment.kind,
        "metadata": {"name": experiment.metadata.name, "namespace": experiment.metadata.namespace,
                     # the spec below holds every default: this says which rollouts/replay fields the user set
                     "annotations": {SET_FIELDS_ANNOTATION: spec_fields_set(experiment)}},
        "spec": experiment.spec.to_manifest(),
    }
    return dump_yaml(doc, sort_keys=False)


def build_config_map(experiment: RLExperiment, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(owner, names.config_map_name(owner.name)),
        "data": {EXPERIMENT_FILE: experiment_yaml(experiment)},
    }
