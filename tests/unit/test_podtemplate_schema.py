"""The pod template's schema: cut from the Kubernetes OpenAPI (never hand-written), committed, embedded in
the CRD with descriptions for `kubectl explain`, and small enough for a client-side `kubectl apply`."""

from __future__ import annotations

import json

from kuberl.api import podtemplate
from kuberl.api.crd import build_crd


def _spec_schema() -> dict:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_committed_schema_matches_a_fresh_generation_from_the_kubernetes_api():
    fresh = json.loads(json.dumps(podtemplate.generate_schema(), sort_keys=True))
    assert podtemplate.template_schema() == fresh, "run `python -m kuberl.api.podtemplate` (make crds)"


def test_only_the_allowed_fields_are_in_the_schema():
    schema = podtemplate.template_schema()
    assert set(schema["properties"]) == {"metadata", "spec"}
    assert set(schema["properties"]["metadata"]["properties"]) == {"labels", "annotations"}
    spec = schema["properties"]["spec"]["properties"]
    assert set(spec) == set(podtemplate.POD_FIELDS)
    assert set(spec["containers"]["items"]["properties"]) == set(podtemplate.MAIN_CONTAINER_FIELDS)
    assert "hostPath" not in spec["volumes"]["items"]["properties"]
    assert "persistentVolumeClaim" in spec["volumes"]["items"]["properties"]
    init_security = spec["initContainers"]["items"]["properties"]["securityContext"]["properties"]
    assert init_security["privileged"]["enum"] == [False] and init_security["runAsUser"]["minimum"] == 1


def test_the_schema_is_structural_for_a_crd():
    def walk(node: dict, path: str) -> None:
        assert "$ref" not in node and "oneOf" not in node, path
        assert node.get("additionalProperties") is None or isinstance(node["additionalProperties"], dict), path
        assert not isinstance(node.get("type"), list), path
        assert not any(k.startswith("x-kubernetes-patch") or k == "x-kubernetes-list-type" for k in node), path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        for key, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                walk(node[key], f"{path}[{key}]")

    walk(podtemplate.template_schema(), "template")


def test_kubectl_explain_has_descriptions_down_the_first_levels():
    for role in ("head", "workers"):
        template = _spec_schema()["properties"][role]["properties"]["template"]
        assert "PodTemplateSpec" in template["description"]
        spec = template["properties"]["spec"]
        assert spec["description"] and spec["properties"]["volumes"]["description"]
        assert spec["properties"]["volumes"]["items"]["properties"]["persistentVolumeClaim"]["description"]
        assert spec["properties"]["containers"]["items"]["properties"]["env"]["description"]
        assert template["properties"]["metadata"]["properties"]["labels"]["description"]


def test_the_crd_fits_a_client_side_kubectl_apply():
    # kubectl apply (client side) stores the object in an annotation, at most 256 KiB.
    assert len(json.dumps(build_crd(), separators=(",", ":"))) < 256 * 1024 * 0.75
