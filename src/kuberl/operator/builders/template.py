"""Merge a user's partial PodTemplateSpec (spec.head.template / spec.workers.template) onto a built pod.

Pure: a pod body and a template in, a new pod body out. The template was checked against
`kuberl.api.podtemplate` before it gets here, so it holds only allowed fields and nothing the operator
owns; the merge still never lets it replace what the operator set: labels, annotations and env are
added after the operator's, volumes and mounts appended, extra resources added beside cpu/memory/GPUs.
"""

from __future__ import annotations

import copy
from typing import Any

# Pod fields a template sets as a whole (the operator never sets them).
REPLACED_POD_FIELDS = ("imagePullSecrets", "affinity", "topologySpreadConstraints", "runtimeClassName")


def _init_container(container: dict[str, Any], security: dict[str, Any]) -> dict[str, Any]:
    """An init container (or native sidecar) with the main container's restricted security context
    underneath whatever the user set (the schema already refused privileged, root and the profiles that
    "restricted" forbids). Capabilities merge: the main container's drops stay, whatever the user adds."""
    merged = copy.deepcopy(container)
    own = container.get("securityContext") or {}
    context = {**copy.deepcopy(security), **copy.deepcopy(own)}
    if "capabilities" in own:
        base, added = security.get("capabilities") or {}, own["capabilities"] or {}
        drop = [*base.get("drop", []), *(c for c in added.get("drop", []) if c not in base.get("drop", []))]
        context["capabilities"] = {**added, "drop": drop}
    merged["securityContext"] = context
    return merged


def _merge_main_container(container: dict[str, Any], patch: dict[str, Any]) -> None:
    container["env"] = [*container.get("env", []), *copy.deepcopy(patch.get("env") or [])]
    if patch.get("envFrom"):
        container["envFrom"] = [*container.get("envFrom", []), *copy.deepcopy(patch["envFrom"])]
    container["volumeMounts"] = [*container.get("volumeMounts", []), *copy.deepcopy(patch.get("volumeMounts") or [])]
    for part, amounts in (patch.get("resources") or {}).items():
        target = container.setdefault("resources", {}).setdefault(part, {})
        for key, value in amounts.items():
            target.setdefault(key, value)  # cpu, memory and GPUs stay the operator's


def apply_template(pod: dict[str, Any], template: dict[str, Any] | None) -> dict[str, Any]:
    """The pod with the template merged in; the pod itself is not changed."""
    merged = copy.deepcopy(pod)
    if not template:
        return merged
    meta, spec = template.get("metadata") or {}, template.get("spec") or {}
    for part in ("labels", "annotations"):
        if meta.get(part):
            merged["metadata"][part] = {**meta[part], **merged["metadata"].get(part, {})}
    pod_spec = merged["spec"]
    for field in REPLACED_POD_FIELDS:
        if field in spec:
            pod_spec[field] = copy.deepcopy(spec[field])
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), *copy.deepcopy(spec.get("volumes") or [])]
    main = pod_spec["containers"][0]
    if spec.get("initContainers"):
        security = main.get("securityContext") or {}
        pod_spec["initContainers"] = [_init_container(c, security) for c in spec["initContainers"]]
    for patch in spec.get("containers") or []:
        _merge_main_container(main, patch)
    return merged
