"""The head Pod (Ray head + trainer driver) and the worker Pods (Ray nodes) of an experiment."""

from __future__ import annotations

import math
import shlex
from typing import Any

from kuberl.api.contract import (
    ATTEMPT_ANNOTATION,
    ENV_ATTEMPT,
    ENV_EXPECTED_NODES,
    ENV_EXPERIMENT_NAME,
    ENV_EXPERIMENT_NAMESPACE,
    ENV_IMAGE,
    ENV_STATUS_PORT,
    ENV_WANDB_API_KEY,
    HEAD_ROLE,
    MALLOC_ENV,
    OPTIONAL_CREDENTIAL_KEYS,
    REQUIRED_CREDENTIAL_KEYS,
    WORKER_ROLE,
)
from kuberl.api.types import PodSpec, RLExperiment
from kuberl.operator import names
from kuberl.operator.builders.common import Owner, metadata
from kuberl.operator.builders.configmap import EXPERIMENT_FILE
from kuberl.operator.builders.secret import TOKEN_KEY
from kuberl.operator.builders.service import CLIENT_PORT, DASHBOARD_PORT, GCS_PORT, head_ports
from kuberl.operator.builders.template import apply_template

GPU_RESOURCE = "nvidia.com/gpu"
CONFIG_DIR = "/etc/kuberl"
RUN_AS_USER = 1000
HEAD_GRACE_SECONDS = 60  # time for the trainer's final checkpoint after SIGTERM
STORAGE_SECRET_KEYS = (*((key, False) for key in REQUIRED_CREDENTIAL_KEYS),
                       *((key, True) for key in OPTIONAL_CREDENTIAL_KEYS))  # (key, optional)


def ray_cpus(cpu: int | str) -> int:
    """Whole CPUs for Ray's --num-cpus (at least 1), so Ray never counts the node's CPUs instead."""
    text = str(cpu)
    value = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    return max(1, math.ceil(value))


def _resources(pod: PodSpec) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": str(pod.cpu), "memory": str(pod.memory)}
    limits = dict(amounts)
    if pod.gpus:
        limits[GPU_RESOURCE] = str(pod.gpus)
    return {"requests": amounts, "limits": limits}


def _tolerations(pod: PodSpec) -> list[dict[str, Any]]:
    result = [t.to_manifest() for t in pod.tolerations]
    gpu = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
    if pod.gpus and gpu not in result:
        result.append(gpu)
    return result


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _common_env(experiment: RLExperiment, owner: Owner, attempt: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": ENV_EXPERIMENT_NAME, "value": owner.name},
        {"name": ENV_EXPERIMENT_NAMESPACE, "value": owner.namespace},
        {"name": ENV_ATTEMPT, "value": str(attempt)},
        {"name": "RAY_AUTH_MODE", "value": "token"},
        _secret_env("RAY_AUTH_TOKEN", names.token_secret_name(owner.name), TOKEN_KEY),
        {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *({"name": name, "value": value} for name, value in MALLOC_ENV.items()),
    ]
    secret_ref = experiment.spec.storage.secret_ref
    if secret_ref is not None:  # credentials only ever come from the Secret, never from the spec
        env += [_secret_env(key, secret_ref.name, key, optional) for key, optional in STORAGE_SECRET_KEYS]
    return env


def _container_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_spec(experiment: RLExperiment, pod: PodSpec, container: dict[str, Any],
              volumes: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",  # the operator decides about restarts (backoffLimit, attempt)
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "tmp", "emptyDir": {}},  # Ray's session dirs and HOME; the root filesystem is read-only
            {"name": "shm", "emptyDir": {"medium": "Memory"}},  # Ray's object store
            *volumes,
        ],
    }
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    tolerations = _tolerations(pod)
    if tolerations:
        spec["tolerations"] = tolerations
    if experiment.spec.service_account_name:
        spec["serviceAccountName"] = experiment.spec.service_account_name
    if experiment.spec.priority_class_name:
        spec["priorityClassName"] = experiment.spec.priority_class_name
    return spec


_MOUNTS = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "shm", "mountPath": "/dev/shm"}]


def head_command(experiment: RLExperiment) -> str:
    head = experiment.spec.head
    ray = (f"ray start --head --node-ip-address=${{POD_IP}} --port={GCS_PORT} "
           f"--ray-client-server-port={CLIENT_PORT} --dashboard-host=0.0.0.0 --dashboard-port={DASHBOARD_PORT} "
           f"--num-cpus={ray_cpus(head.cpu)} --num-gpus={head.gpus} --disable-usage-stats")
    return f"{ray} && exec kuberl train --in-cluster -f {CONFIG_DIR}/{EXPERIMENT_FILE}"


def worker_command(experiment: RLExperiment, owner: Owner, status_port: int) -> str:
    workers = experiment.spec.workers
    head = names.head_name(owner.name)
    # Wait for the trainer's status port, not the GCS port: the trainer starts only after
    # `ray start --head` has registered the head node, and a worker that joins a GCS before
    # that fails ("No node info found for head node").
    probe = f'import socket; socket.create_connection(("{head}", {status_port}), 2)'
    wait = f"until python -c {shlex.quote(probe)} 2>/dev/null; do sleep 1; done"
    ray = (f"exec ray start --address={head}:{GCS_PORT} --node-ip-address=${{POD_IP}} --block "
           f"--num-cpus={ray_cpus(workers.cpu)} --num-gpus={workers.gpus} --disable-usage-stats")
    return f"{wait}; {ray}"


def _wandb_env(experiment: RLExperiment) -> list[dict[str, Any]]:
    """W&B's API key from the Secret the spec names: only a secretKeyRef, never the key itself."""
    wandb = experiment.spec.tracking.wandb
    if wandb is None or wandb.api_key_secret_ref is None:
        return []
    return [_secret_env(ENV_WANDB_API_KEY, wandb.api_key_secret_ref.name, wandb.api_key_secret_ref.key)]


def build_head_pod(experiment: RLExperiment, owner: Owner, attempt: int, *, status_port: int) -> dict[str, Any]:
    spec = experiment.spec
    env = [
        *_common_env(experiment, owner, attempt),
        {"name": "RAY_ADDRESS", "value": f"$(POD_IP):{GCS_PORT}"},
        {"name": ENV_EXPECTED_NODES, "value": str(1 + spec.workers.replicas)},
        {"name": ENV_STATUS_PORT, "value": str(status_port)},
        {"name": ENV_IMAGE, "value": spec.image or ""},
        *_wandb_env(experiment),
    ]
    container = {
        "name": "head",
        "image": spec.image,
        "command": ["/bin/sh", "-c", head_command(experiment)],
        "env": env,
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in head_ports(status_port)],
        "resources": _resources(spec.head),
        "securityContext": _container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [*_MOUNTS, {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    config = {"name": "config", "configMap": {"name": names.config_map_name(owner.name)}}
    pod_spec = _pod_spec(experiment, spec.head, container, [config])
    pod_spec["terminationGracePeriodSeconds"] = HEAD_GRACE_SECONDS
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(owner, names.head_name(owner.name), role=HEAD_ROLE,
                             annotations={ATTEMPT_ANNOTATION: str(attempt)}),
        "spec": pod_spec,
    }
    return apply_template(pod, spec.head.template)  # the user's spec.head.template, checked in validation


def build_worker_pod(experiment: RLExperiment, owner: Owner, index: int, attempt: int, *,
                     status_port: int) -> dict[str, Any]:
    spec = experiment.spec
    container = {
        "name": "worker",
        "image": spec.image,
        "command": ["/bin/sh", "-c", worker_command(experiment, owner, status_port)],
        "env": _common_env(experiment, owner, attempt),
        "resources": _resources(spec.workers),
        "securityContext": _container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": list(_MOUNTS),
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(owner, names.worker_name(owner.name, index), role=WORKER_ROLE,
                             annotations={ATTEMPT_ANNOTATION: str(attempt)}),
        "spec": _pod_spec(experiment, spec.workers, container, []),
    }
    return apply_template(pod, spec.workers.template)  # the user's spec.workers.template
