"""Kubernetes schemas as the tests apply them: CRD structural schemas as plain JSON Schema, and
kubernetes-validate's strict schemas for built-in kinds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.35.0"
PODGROUP_CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "podgroup-crds"


def walk_schema(node: Any, path: str = "$") -> Iterator[tuple[str, Any]]:
    """Every node of a structural schema with its path: `$.spec.env`, `[]` for items, `{}` for a map's values."""
    yield path, node
    if isinstance(node, dict):
        for name, child in node.get("properties", {}).items():
            yield from walk_schema(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield from walk_schema(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from walk_schema(node["additionalProperties"], f"{path}{{}}")


def as_json_schema(node: Any) -> Any:
    """A structural schema as plain JSON Schema with the Kubernetes extensions' meaning: unknown fields
    refused (kubectl's default strict field validation), x-kubernetes-int-or-string as integer-or-string.

    x-kubernetes-validations (CEL) are not evaluated.
    """
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "description"}
    if node.get("x-kubernetes-int-or-string"):
        string = {"type": "string", **({"pattern": node["pattern"]} if "pattern" in node else {})}
        return {"anyOf": [{"type": "integer"}, string]}
    if "properties" in node:
        out["properties"] = {k: as_json_schema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out[key] = as_json_schema(node[key])
    return out


def podgroup_crds() -> list[dict[str, Any]]:
    """The upstream PodGroup CRDs (Volcano, scheduler-plugins) stored under tests/fixtures."""
    return [yaml.safe_load(p.read_text()) for p in sorted(PODGROUP_CRDS.glob("*.yaml"))]


def validate_custom_object(obj: dict[str, Any], crds: list[dict[str, Any]]) -> None:
    """Raise jsonschema.ValidationError unless `obj` fits the schema of its CRD's version."""
    group, _, version = obj["apiVersion"].rpartition("/")
    crd = next(c for c in crds if c["spec"]["group"] == group and c["spec"]["names"]["kind"] == obj["kind"])
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    jsonschema.validate(obj, as_json_schema(served["schema"]["openAPIV3Schema"]))


def validate_strict(obj: dict[str, Any]) -> None:
    """`kubernetes-validate --strict` for built-in kinds; PodGroups against their upstream CRDs."""
    if obj["kind"] == "PodGroup":
        validate_custom_object(obj, podgroup_crds())
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
