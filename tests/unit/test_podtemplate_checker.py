"""kuberl.api.podtemplate's schema check against jsonschema, the library, as the oracle.

The check is hand-written so that the API needs no more than pyyaml and pydantic (docs/architecture.md
says why). Here jsonschema (a dev dependency, through kubernetes-validate) validates the same templates
against the same committed schema, read the way the check and the API server read it: a field not listed
under `properties` is refused, int-or-string takes a string or a number, and an integer is an int. Both
must find faults at the same places, over every field of a full template replaced by every JSON type and
given an unknown key. And the schema may use only keywords the check implements, so that a regeneration
that brings a new one fails here instead of going unchecked.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, validators

from kuberl.api.podtemplate import schema_errors, template_schema

CHECKED_KEYWORDS = {"type", "properties", "required", "items", "additionalProperties", "enum", "minimum",
                    "maxItems", "x-kubernetes-int-or-string"}
ANNOTATIONS = {"description", "format"}  # Kubernetes' formats (int32, byte, ...) are not enforced by either

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "rl"}, "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "imagePullSecrets": [{"name": "registry-creds"}],
        "runtimeClassName": "gvisor",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
        "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
                    {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
        "initContainers": [{"name": "fetch", "image": "busybox", "restartPolicy": "Always",
                            "resources": {"limits": {"cpu": 0.5, "memory": "64Mi"}},
                            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "privileged": False,
                                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}}],
        "containers": [{"name": "head", "env": [{"name": "A", "value": "1"},
                                                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                        "envFrom": [{"configMapRef": {"name": "team"}}],
                        "volumeMounts": [{"name": "datasets", "mountPath": "/data", "readOnly": True}],
                        "resources": {"limits": {"example.com/fpga": 1}, "requests": {"example.com/fpga": "1"}}}],
    },
}
JSON_VALUES = (None, True, 7, 1.5, "text", [], {})


def _strict_integer(checker: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _closed(node: Any) -> Any:
    """The schema as the check reads it, in plain JSON Schema."""
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if k != "x-kubernetes-int-or-string"}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["string", "number"]
    if "properties" in node:
        out["properties"] = {k: _closed(v) for k, v in node["properties"].items()}
        out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out[key] = _closed(node[key])
    return out


Oracle = validators.extend(Draft202012Validator,
                           type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer))
ORACLE = Oracle(_closed(template_schema()))


def _path(parts: Any) -> str:
    return "t" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def oracle_paths(template: Any) -> set[str]:
    paths: set[str] = set()
    for error in ORACLE.iter_errors(template):
        at = _path(error.absolute_path)
        if error.validator == "required":
            paths |= {f"{at}.{key}" for key in error.validator_value if key not in error.instance}
        elif error.validator == "additionalProperties":
            paths |= {f"{at}.{key}" for key in error.instance if key not in error.schema.get("properties", {})}
        else:
            paths.add(at)
    return paths


def checker_paths(template: Any) -> set[str]:
    return {path for path, _ in schema_errors(template, template_schema(), "t")}


def _nodes(node: Any, parts: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield parts, node
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from _nodes(child, (*parts, key))


def _replaced(parts: tuple[Any, ...], value: Any) -> dict[str, Any]:
    template = copy.deepcopy(TEMPLATE)
    parent = template
    for part in parts[:-1]:
        parent = parent[part]
    parent[parts[-1]] = value
    return template


def variants() -> Iterator[tuple[str, Any]]:
    """Every field replaced by every JSON type, an unknown key in every object, and the refused values."""
    for parts, node in _nodes(TEMPLATE):
        if parts:
            for value in JSON_VALUES:
                yield f"{_path(parts)} = {value!r}", _replaced(parts, value)
        if isinstance(node, dict):
            yield f"{_path(parts)}.bogus", _replaced((*parts, "bogus"), "x")
    init, spec = ("spec", "initContainers", 0, "securityContext"), ("spec",)
    for field, value in {"privileged": True, "runAsUser": 0, "runAsNonRoot": False, "procMount": "Unmasked",
                         "capabilities": {"add": ["SYS_ADMIN"]}}.items():
        yield f"initContainers securityContext.{field}", _replaced((*init, field), value)
    yield "two containers", _replaced((*spec, "containers"), [{"name": "head"}, {"name": "sidecar"}])
    yield "hostNetwork", _replaced((*spec, "hostNetwork"), True)
    yield "hostPath volume", _replaced((*spec, "volumes", 0), {"name": "host", "hostPath": {"path": "/"}})
    yield "env without a name", _replaced(("spec", "containers", 0, "env", 0), {"value": "1"})


def test_the_full_template_passes_both():
    assert checker_paths(TEMPLATE) == oracle_paths(TEMPLATE) == set()


def test_the_check_finds_what_jsonschema_finds():
    differ = {case: (checker_paths(template), oracle_paths(template)) for case, template in variants()
              if checker_paths(template) != oracle_paths(template)}
    assert differ == {}


def test_the_variants_break_the_template_in_many_places():
    broken = [case for case, template in variants() if oracle_paths(template)]
    assert len(broken) > 200


def test_the_schema_uses_only_the_keywords_the_check_implements():
    used: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        used.update(node)
        for child in node.get("properties", {}).values():
            walk(child)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                walk(node[key])

    walk(template_schema())
    assert used - CHECKED_KEYWORDS - ANNOTATIONS == set()
