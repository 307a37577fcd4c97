"""Pure builders: an RLExperiment (resolved) in, a Kubernetes object body out. No API calls."""

from kuberl.operator.builders.common import Owner, owner_of, resolve_experiment
from kuberl.operator.builders.configmap import build_config_map
from kuberl.operator.builders.networkpolicy import build_network_policy
from kuberl.operator.builders.pod import build_head_pod, build_worker_pod
from kuberl.operator.builders.secret import build_token_secret, new_token
from kuberl.operator.builders.service import build_head_service

__all__ = [
    "Owner",
    "build_config_map",
    "build_head_pod",
    "build_head_service",
    "build_network_policy",
    "build_token_secret",
    "build_worker_pod",
    "new_token",
    "owner_of",
    "resolve_experiment",
]
