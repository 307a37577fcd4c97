"""What the emulator serves: resource types (built-in and from CRDs) and how a URL names one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp.web


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    scale_spec_path: str | None = None  # e.g. ".spec.workers.replicas"
    scale_status_path: str | None = None
    scale_selector_path: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN_TYPES = (
    ResourceType("", "v1", "pods", "Pod", status_subresource=True),
    ResourceType("", "v1", "services", "Service", status_subresource=True),
    ResourceType("", "v1", "configmaps", "ConfigMap"),
    ResourceType("", "v1", "secrets", "Secret"),
    ResourceType("", "v1", "events", "Event"),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount"),
    ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True),
    ResourceType("events.k8s.io", "v1", "events", "Event"),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                 namespaced=False, status_subresource=True),
    ResourceType("kopf.dev", "v1", "kopfpeerings", "KopfPeering"),
    ResourceType("kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", namespaced=False),
)
VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}


def types_of_crd(crd: dict[str, Any]) -> Iterator[ResourceType]:
    """One ResourceType per served version of a CustomResourceDefinition."""
    spec = crd["spec"]
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        sub = version.get("subresources") or {}
        scale = sub.get("scale") or {}
        yield ResourceType(
            spec["group"], version["name"], spec["names"]["plural"], spec["names"]["kind"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            status_subresource="status" in sub,
            scale_spec_path=scale.get("specReplicasPath"),
            scale_status_path=scale.get("statusReplicasPath"),
            scale_selector_path=scale.get("labelSelectorPath"),
        )


@dataclass(frozen=True)
class ApiCall:
    """A resource request, parsed once (KMock's Request does much more than the store needs)."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    data: Any
    subresource: str | None
    raw: aiohttp.web.BaseRequest


def resource_target(path: str) -> tuple[str, str, str | None, str | None, str | None] | None:
    """(group, plural, namespace, name, subresource) of a resource URL; None for anything else."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # discovery of a group version
    if rest[0] == "namespaces" and len(rest) <= 2:  # the namespaces themselves
        return group, "namespaces", None, rest[1] if len(rest) == 2 else None, None
    namespace = None
    if rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    plural, name = rest[0], rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) or None
    return group, plural, namespace, name, sub
