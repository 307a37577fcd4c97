"""Deterministic, always-valid names and label values for an experiment's children.

Every child name is BASE + a suffix ("-head", "-worker-999", ...). BASE is the experiment name
when that makes valid names; otherwise (a name too long for a 63-character DNS label once the
suffix is added, one starting with a digit, one with dots) it is a sanitised prefix plus a hash
of the full name, so different experiments never share children and a restart finds the same ones.
"""

from __future__ import annotations

import hashlib
import re

MAX_LABEL = 63  # DNS-1035 label (Service names) and label values
LONGEST_SUFFIX = "-worker-999"  # spec.workers.replicas <= 1000
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_HASH_LEN = 8


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:_HASH_LEN]


def _shorten(name: str, budget: int) -> str:
    """A DNS-1035 label of at most `budget` characters: a readable prefix of `name` and its hash."""
    cleaned = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "x" + cleaned
    prefix = cleaned[: budget - _HASH_LEN - 1].rstrip("-")
    return f"{prefix}-{_digest(name)}"


def base_name(experiment: str) -> str:
    """The prefix of every child name of this experiment."""
    if _DNS1035.match(experiment) and len(experiment) + len(LONGEST_SUFFIX) <= MAX_LABEL:
        return experiment
    return _shorten(experiment, MAX_LABEL - len(LONGEST_SUFFIX))


def experiment_label(experiment: str) -> str:
    """The value of the kuberl.io/experiment label (label values are limited to 63 characters)."""
    if len(experiment) <= MAX_LABEL and re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", experiment):
        return experiment
    return _shorten(experiment, MAX_LABEL)


def config_map_name(experiment: str) -> str:
    return f"{base_name(experiment)}-config"


def head_name(experiment: str) -> str:
    """The head Pod and the head Service share this name (workers reach the head as NAME-head:6379)."""
    return f"{base_name(experiment)}-head"


def worker_name(experiment: str, index: int) -> str:
    return f"{base_name(experiment)}-worker-{index}"


def token_secret_name(experiment: str) -> str:
    return f"{base_name(experiment)}-ray-token"


def network_policy_name(experiment: str) -> str:
    return f"{base_name(experiment)}-ray"


def pod_group_name(experiment: str) -> str:
    """The gang scheduler's PodGroup (one per experiment, resized on scale)."""
    return f"{base_name(experiment)}-group"


def kueue_group_name(experiment: str, attempt: int) -> str:
    """The Kueue pod group of one attempt: a head restart forms a new group, admitted afresh."""
    return f"{base_name(experiment)}-a{attempt}"
