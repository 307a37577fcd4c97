"""`spec.head.template` / `spec.workers.template`: the part of a PodTemplateSpec a user may add.

The schema is not written by hand: `python -m kuberl.api.podtemplate` cuts it out of the Kubernetes
OpenAPI (kubernetes-validate's bundled definitions, pinned to KUBERNETES_VERSION), keeps only the
allowed fields and their descriptions, and writes it to `podtemplate.schema.json` beside this module;
the CRD embeds it (so `kubectl explain rlx.spec.head.template` reads the upstream docs) and
`template_errors()` checks manifests against it, so the API server, `kuberl validate` and the operator
refuse the same fields. A test fails when the committed schema drifts from a fresh generation.

What a template may not touch is either the operator's (the main container's image, command, args and
ports; its KUBERL_* and RAY_* variables; the labels the operator, Kueue or the gang scheduler read) or
would break the pods' security guarantees (host namespaces, privileged or root containers).
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

from kuberl.api.contract import APP_LABEL, OPTIONAL_CREDENTIAL_KEYS, REQUIRED_CREDENTIAL_KEYS

KUBERNETES_VERSION = "1.35.0"
SCHEMA_FILE = Path(__file__).with_name("podtemplate.schema.json")
_DEFS_PREFIX = "#/$defs/"
DESCRIBED_DEPTH = 3

METADATA_FIELDS = ("labels", "annotations")
POD_FIELDS = ("containers", "imagePullSecrets", "affinity", "topologySpreadConstraints", "volumes",
              "initContainers", "runtimeClassName")
MAIN_CONTAINER_FIELDS = ("name", "env", "envFrom", "volumeMounts", "resources")
MAIN_CONTAINER_RESOURCES = ("limits", "requests")
REFUSED_VOLUME_SOURCES = ("hostPath",)  # a node's filesystem: outside the pod security guarantees

# Why a field is refused, by its path under the template (list indices left out).
_SECURITY = "not allowed: it breaks the pod security guarantees (non-root, no host access)"
_OWNED = "owned by the operator"
REFUSED_BECAUSE = {
    "spec.hostNetwork": _SECURITY, "spec.hostPID": _SECURITY, "spec.hostIPC": _SECURITY,
    "spec.hostUsers": _SECURITY, "spec.securityContext": _SECURITY,
    "spec.containers.securityContext": _SECURITY,
    "spec.containers.image": f"{_OWNED}; set spec.image to change the trainer image",
    "spec.containers.command": _OWNED, "spec.containers.args": _OWNED, "spec.containers.ports": _OWNED,
    "spec.nodeSelector": "set spec.head.nodeSelector / spec.workers.nodeSelector instead",
    "spec.tolerations": "set spec.head.tolerations / spec.workers.tolerations instead",
    "spec.serviceAccountName": "set spec.serviceAccountName instead",
    "spec.priorityClassName": "set spec.priorityClassName instead",
    "spec.schedulerName": "set spec.scheduling.schedulerName instead",
    "spec.restartPolicy": _OWNED, "spec.volumes.hostPath": _SECURITY,
}
# Keys the operator, Kueue and the gang schedulers read on the pods: set them on the RLExperiment.
OWNED_KEY_PREFIXES = ("kuberl.io/", "kueue.x-k8s.io/", "scheduling.x-k8s.io/", "scheduling.k8s.io/", APP_LABEL)
OWNED_ENV_PREFIXES = ("KUBERL_", "RAY_")
OWNED_ENV_NAMES = ("POD_IP", "HOME", "PYTHONUNBUFFERED")
# The operator's volumes and where it mounts them (pod.py): a template may not shadow them.
OWNED_VOLUMES = ("tmp", "shm", "config")
OWNED_MOUNT_PATHS = ("/tmp", "/dev/shm", "/etc/kuberl")
OWNED_RESOURCES = {"cpu": "set spec.{role}.cpu instead", "memory": "set spec.{role}.memory instead",
                   "nvidia.com/gpu": "set spec.{role}.gpus instead"}
STORAGE_ENV_NAMES = (*REQUIRED_CREDENTIAL_KEYS, *OPTIONAL_CREDENTIAL_KEYS)

# Init containers keep the restricted security profile: what the schema can pin, it pins.
INIT_SECURITY_LIMITS: dict[str, dict[str, Any]] = {
    "privileged": {"enum": [False]},
    "allowPrivilegeEscalation": {"enum": [False]},
    "runAsNonRoot": {"enum": [True]},
    "runAsUser": {"minimum": 1},
    "procMount": {"enum": ["Default"]},
}
# ... and in the nested fields, the values Pod Security's "restricted" level allows.
_RESTRICTED_PROFILE = {"enum": ["RuntimeDefault", "Localhost"]}
INIT_SECURITY_NESTED_LIMITS: dict[tuple[str, str], dict[str, Any]] = {
    ("seccompProfile", "type"): _RESTRICTED_PROFILE,
    ("appArmorProfile", "type"): _RESTRICTED_PROFILE,
    ("seLinuxOptions", "type"): {"enum": ["", "container_t", "container_init_t", "container_kvm_t",
                                          "container_engine_t"]},
    ("seLinuxOptions", "user"): {"enum": [""]},
    ("seLinuxOptions", "role"): {"enum": [""]},
}
_DROPPED_KEYS = {"default", "x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy",
                 "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
                 "x-kubernetes-unions", "additionalProperties_false"}


# --- generation (a development step: needs kubernetes-validate) ------------------------------------------


def _upstream_definitions(version: str) -> dict[str, Any]:
    import importlib.resources

    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    definitions: dict[str, Any] = json.loads((root / f"v{version}-local-strict" / "_definitions.json").read_text())
    defs: dict[str, Any] = definitions["$defs"]
    return defs


def _structural(node: Any, defs: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """An upstream JSON schema node as a Kubernetes structural schema: refs inlined, nullable types
    made plain, quantities and int-or-strings marked, the keys a CRD may not carry dropped."""
    if isinstance(node, list):
        return [_structural(n, defs, seen) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].removeprefix(_DEFS_PREFIX)
        if name in seen:
            raise ValueError(f"recursive type {name} cannot be inlined")
        target = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(target, defs, (*seen, name))
    out: dict[str, Any] = {}
    if "oneOf" in node:  # Quantity and IntOrString: a string or a number
        out["x-kubernetes-int-or-string"] = True
    for key, value in node.items():
        if key in _DROPPED_KEYS or key == "oneOf" or (key == "additionalProperties" and value is False):
            continue
        if key == "type":
            types = [t for t in (value if isinstance(value, list) else [value]) if t != "null"]
            out["type"] = types[0]
        elif key == "properties":
            out["properties"] = {k: _structural(v, defs, seen) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs, seen)
        elif key == "description":
            out[key] = value.split("\n\n")[0]  # the first paragraph: what `kubectl explain` needs
        else:
            out[key] = value
    return out


def _only(schema: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    kept = dict(schema)
    kept["properties"] = {k: v for k, v in schema["properties"].items() if k in fields}
    kept["required"] = [r for r in schema.get("required", []) if r in fields]
    if not kept["required"]:
        kept.pop("required")
    return kept


def _trim_descriptions(node: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """Descriptions down to DESCRIBED_DEPTH fields under the template: `kubectl explain` reads well there,
    and the CRD (two templates) stays far below the 256 KiB a client-side `kubectl apply` can store."""
    if depth > DESCRIBED_DEPTH:
        node.pop("description", None)
    for key, value in node.items():
        if key == "properties":
            for child in value.values():
                _trim_descriptions(child, depth + 1)
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            _trim_descriptions(value, depth)
    return node


def generate_schema(version: str = KUBERNETES_VERSION) -> dict[str, Any]:
    defs = _upstream_definitions(version)
    template = _structural({"$ref": _DEFS_PREFIX + "io.k8s.api.core.v1.PodTemplateSpec"}, defs)
    meta = _only(template["properties"]["metadata"], METADATA_FIELDS)
    pod = _only(template["properties"]["spec"], POD_FIELDS)
    pod.pop("required", None)  # containers is required in a Pod, not in a partial template
    props = pod["properties"]
    main = _only(props["containers"]["items"], MAIN_CONTAINER_FIELDS)
    main.pop("required", None)  # the name says which container; it may be left out
    main["properties"]["resources"] = _only(main["properties"]["resources"], MAIN_CONTAINER_RESOURCES)
    props["containers"] = {**props["containers"], "maxItems": 1, "items": main,
                           "description": "The main container (head or worker): only env, envFrom, volumeMounts "
                                          "and extra resources; its image, command, args and ports are the "
                                          "operator's. Add sidecars as initContainers with restartPolicy: Always."}
    volume = props["volumes"]["items"]
    volume["properties"] = {k: v for k, v in volume["properties"].items() if k not in REFUSED_VOLUME_SOURCES}
    security = props["initContainers"]["items"]["properties"]["securityContext"]["properties"]
    for field, limit in INIT_SECURITY_LIMITS.items():
        security[field] = {**security[field], **limit}
    for (field, part), limit in INIT_SECURITY_NESTED_LIMITS.items():
        if field in security:  # appArmorProfile: Kubernetes 1.30 and later
            nested = security[field]["properties"]
            nested[part] = {**nested[part], **limit}
    security["capabilities"]["properties"]["add"]["items"] = {
        **security["capabilities"]["properties"]["add"]["items"], "enum": ["NET_BIND_SERVICE"]}
    security["windowsOptions"]["properties"]["hostProcess"] = {
        **security["windowsOptions"]["properties"]["hostProcess"], "enum": [False]}
    return _trim_descriptions({
        "type": "object",
        "description": "A partial PodTemplateSpec merged onto the pod the operator builds (labels, annotations, "
                       "pull secrets, affinity, spreading, volumes, init containers, runtime class, and the main "
                       "container's env, envFrom, volumeMounts and extra resources). "
                       f"Schema from the Kubernetes {version} API.",
        "properties": {"metadata": meta, "spec": pod},
    })


def write_schema(path: Path = SCHEMA_FILE) -> None:
    path.write_text(json.dumps(generate_schema(), indent=1, sort_keys=True) + "\n")


@functools.cache
def template_schema() -> dict[str, Any]:
    """The committed schema (no kubernetes-validate needed at run time)."""
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return schema


# --- checking --------------------------------------------------------------------------------------------

_JSON_TYPES: dict[str, type | tuple[type, ...]] = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def _kind_ok(value: Any, expected: str) -> bool:
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    return isinstance(value, _JSON_TYPES[expected])


def _generic(path: str) -> str:
    return re.sub(r"\[\d+\]", "", path)


def schema_errors(value: Any, schema: dict[str, Any], path: str, rel: str = "") -> list[tuple[str, str]]:
    """(path, message) for every place `value` breaks the structural `schema`; `rel` is the path under
    the template, which looks up why a field is refused."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str | int | float) and not isinstance(value, bool)
        return [] if ok else [(path, "must be a string or a number")]
    expected = schema.get("type")
    if expected and not _kind_ok(value, expected):
        return [(path, f"must be {'an' if expected[0] in 'aeiou' else 'a'} {expected}")]
    errors: list[tuple[str, str]] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append((path, f"must be {json.dumps(schema['enum'][0])}" if len(schema["enum"]) == 1
                       else f"must be one of {json.dumps(schema['enum'])}"))
    if "minimum" in schema and isinstance(value, int | float) and value < schema["minimum"]:
        errors.append((path, f"must be >= {schema['minimum']}"))
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append((path, f"must have at most {schema['maxItems']} items"))
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{path}[{i}]", f"{rel}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties")
        for key in schema.get("required", []):
            if key not in value:
                errors.append((f"{path}.{key}", "required field is missing"))
        for key, item in value.items():
            sub, sub_rel = f"{path}.{key}", f"{rel}.{key}" if rel else key
            if props is not None and key not in props:
                why = REFUSED_BECAUSE.get(_generic(sub_rel))
                allowed = ", ".join(sorted(props))
                errors.append((sub, why or f"not allowed in a template (allowed here: {allowed})"))
            elif props is not None:
                errors += schema_errors(item, props[key], sub, sub_rel)
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(item, schema["additionalProperties"], sub, sub_rel)
    return errors


def _owned_key(key: str) -> bool:
    return any(key == p or key.startswith(p) for p in OWNED_KEY_PREFIXES)


def _owned_env(name: str, storage_secret: bool) -> bool:
    return (name.startswith(OWNED_ENV_PREFIXES) or name in OWNED_ENV_NAMES
            or (storage_secret and name in STORAGE_ENV_NAMES))


def _main_container_errors(container: dict[str, Any], path: str, role: str, main_name: str,
                           storage_secret: bool) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    if container.get("name", main_name) != main_name:
        errors.append((f"{path}.name", f"must be {main_name!r}, the main container (add sidecars as "
                                       "initContainers with restartPolicy: Always)"))
    for i, env in enumerate(container.get("env") or []):
        if _owned_env(str(env.get("name", "")), storage_secret):
            errors.append((f"{path}.env[{i}].name", f"{env.get('name')!r} is set by the operator"))
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if mount.get("mountPath") in OWNED_MOUNT_PATHS:
            errors.append((f"{path}.volumeMounts[{i}].mountPath", f"{mount['mountPath']!r} is the operator's"))
    for part in MAIN_CONTAINER_RESOURCES:
        for key in (container.get("resources") or {}).get(part) or {}:
            if key in OWNED_RESOURCES:
                errors.append((f"{path}.resources.{part}.{key}", OWNED_RESOURCES[key].format(role=role)))
    return errors


def template_errors(template: dict[str, Any], path: str, role: str, main_name: str, *,
                    storage_secret: bool = False) -> list[tuple[str, str]]:
    """Everything wrong with one template, each as (field path, message). `role`: head | workers."""
    errors = schema_errors(template, template_schema(), path)
    if errors:
        return errors
    meta = template.get("metadata") or {}
    for part in METADATA_FIELDS:
        for key in meta.get(part) or {}:
            if _owned_key(key):
                errors.append((f"{path}.metadata.{part}.{key}", "owned by the operator (put kueue.x-k8s.io/ "
                                                                "labels on the RLExperiment itself)"))
    spec = template.get("spec") or {}
    for i, volume in enumerate(spec.get("volumes") or []):
        if volume.get("name") in OWNED_VOLUMES:
            errors.append((f"{path}.spec.volumes[{i}].name", f"{volume['name']!r} is the operator's volume"))
    for i, container in enumerate(spec.get("containers") or []):
        errors += _main_container_errors(container, f"{path}.spec.containers[{i}]", role, main_name, storage_secret)
    return errors


def main(argv: list[str] | None = None) -> int:
    write_schema()
    print(f"wrote {SCHEMA_FILE} ({SCHEMA_FILE.stat().st_size} bytes) from the Kubernetes {KUBERNETES_VERSION} API")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
