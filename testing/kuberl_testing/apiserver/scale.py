"""The scale subresource: an autoscaling/v1 Scale read from, and written to, a resource's replica paths."""

from __future__ import annotations

from typing import Any

from kuberl_testing.apiserver.patch import merge_patch
from kuberl_testing.apiserver.resources import ResourceType


def _dig(obj: dict[str, Any], path: str) -> Any:
    node: Any = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def with_replicas(rtype: ResourceType, obj: dict[str, Any], replicas: Any) -> dict[str, Any]:
    """A copy of `obj` with `replicas` at the resource's specReplicasPath."""
    parts = (rtype.scale_spec_path or "").strip(".").split(".")
    patch: dict[str, Any] = {parts[-1]: replicas}
    for part in reversed(parts[:-1]):
        patch = {part: patch}
    return merge_patch(obj, patch)


def scale_of(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The Scale object of `obj`, as GET .../scale answers."""
    meta = obj["metadata"]
    return {
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                     "resourceVersion": meta["resourceVersion"], "uid": meta["uid"]},
        "spec": {"replicas": _dig(obj, rtype.scale_spec_path or "") or 0},
        "status": {"replicas": _dig(obj, rtype.scale_status_path or "") or 0,
                   "selector": _dig(obj, rtype.scale_selector_path or "") or ""},
    }
