"""Which API features a backend's server has, for scenarios that need more than Kubernetes 1.20.

The stand-in's emulator models today's API, so it has every feature listed here; kind and the real
control plane are asked for their version (`/version`). The control-plane backend runs v1.20.2
(what Debian 12's sources build), so a scenario marked with a newer feature runs on the stand-in
and on kind, and is skipped on it with the reason.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client as k8s

# feature -> (first Kubernetes release where it is on by default, what it is)
FEATURES: dict[str, tuple[tuple[int, int], str]] = {
    "podSchedulingGates": ((1, 27), "pod scheduling gates (spec.schedulingGates, which Kueue uses to hold a pod)"),
}


def server_version(api: k8s.ApiClient) -> tuple[int, int]:
    info = k8s.VersionApi(api).get_code()
    return int(info.major), int(re.match(r"\d+", info.minor).group())  # minor may read "20+"


def missing_feature(cluster: Any, api: k8s.ApiClient, feature: str) -> str | None:
    """Why `cluster` cannot run a scenario that needs `feature`, or None when it can."""
    if feature not in FEATURES:
        raise KeyError(f"unknown feature {feature!r}; known: {', '.join(FEATURES)}")
    since, what = FEATURES[feature]
    if cluster.kind == "standin":
        return None
    version = server_version(api)
    if version >= since:
        return None
    return (f"needs {what}, Kubernetes {since[0]}.{since[1]}+; the {cluster.kind} backend's API server is "
            f"{version[0]}.{version[1]}: this scenario runs on the stand-in (make e2e) and on kind")
