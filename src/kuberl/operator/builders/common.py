"""What every child shares: the owner, labels, metadata, and the resolved spec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kuberl.api.contract import APP_LABEL, APP_NAME, EXPERIMENT_LABEL, ROLE_LABEL
from kuberl.api.types import API_VERSION, KIND, RLExperiment
from kuberl.operator import names
from kuberl.operator.settings import Settings


@dataclass(frozen=True)
class Owner:
    """The RLExperiment that owns the children (ownerReferences make deletion cascade)."""

    name: str
    namespace: str
    uid: str


def owner_of(body: dict[str, Any]) -> Owner:
    meta = body["metadata"]
    return Owner(meta["name"], meta.get("namespace") or "default", meta["uid"])


def labels(experiment: str, role: str | None = None) -> dict[str, str]:
    result = {APP_LABEL: APP_NAME, EXPERIMENT_LABEL: names.experiment_label(experiment)}
    if role:
        result[ROLE_LABEL] = role
    return result


def selector(experiment: str, role: str | None = None) -> str:
    """The label selector string of the experiment's pods (of one role if given)."""
    return ",".join(f"{k}={v}" for k, v in labels(experiment, role).items())


def owner_reference(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": owner.name, "uid": owner.uid,
            "controller": True, "blockOwnerDeletion": True}


def metadata(owner: Owner, name: str, role: str | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner.name, role),
        "ownerReferences": [owner_reference(owner)],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def resolve_experiment(experiment: RLExperiment, settings: Settings, namespace: str) -> RLExperiment:
    """Fill in what the operator decides: the image, the namespace and unset pod resources."""
    spec = experiment.spec
    head = spec.head.model_copy(update={
        "cpu": spec.head.cpu if "cpu" in spec.head.model_fields_set else settings.default_head_cpu,
        "memory": spec.head.memory if "memory" in spec.head.model_fields_set else settings.default_head_memory,
    })
    workers = spec.workers.model_copy(update={
        "cpu": spec.workers.cpu if "cpu" in spec.workers.model_fields_set else settings.default_worker_cpu,
        "memory": spec.workers.memory if "memory" in spec.workers.model_fields_set
        else settings.default_worker_memory,
    })
    resolved_spec = spec.model_copy(update={"image": spec.image or settings.trainer_image,
                                            "head": head, "workers": workers})
    meta = experiment.metadata.model_copy(update={"namespace": namespace})
    return experiment.model_copy(update={"spec": resolved_spec, "metadata": meta, "status": None})
