"""Generate the RLExperiment CustomResourceDefinition from the API types.

`make crds` writes `crds/rlexperiment.yaml` and the chart's copy; a test fails
when either drifts from what this module generates.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from kuberl.api import types
from kuberl.api.contract import APP_LABEL, APP_NAME

_DROP = {"title", "default", "examples"}
_CHART_CRD = Path("charts/kuberl/templates/crd.yaml")
_CRD_FILE = Path("crds/rlexperiment.yaml")
SOURCE = "src/kuberl/api/types.py"


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve({**target, **extra}, defs)
    return {k: _resolve(v, defs) for k, v in node.items() if k != "$defs"}


def _structural(node: Any) -> Any:
    """Rewrite pydantic's JSON schema into a Kubernetes structural schema."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: v for k, v in node.items() if k not in _DROP}
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if node.get("x-kubernetes-int-or-string"):
            pattern = next((o["pattern"] for o in options if "pattern" in o), None)
            if pattern:
                node["pattern"] = pattern
        elif len(options) == 1:
            return _structural({**options[0], **node})
        else:
            raise ValueError(f"cannot express union in a structural schema: {options}")
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if type(node.get(bound)) in (int, float):  # JSON Schema's number is OpenAPI v3's minimum + true
            node[limit], node[bound] = node[bound], True
    if "const" in node:
        node["enum"] = [node.pop("const")]
        node.setdefault("type", "string")
    if node.get("x-kubernetes-preserve-unknown-fields"):
        node.pop("additionalProperties", None)
        if "type" not in node and not node.get("x-kuberl-scalar"):
            node["type"] = "object"
        node.pop("x-kuberl-scalar", None)
    if "properties" in node:
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
        node.pop("additionalProperties", None)
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"])
    if "items" in node:
        node["items"] = _structural(node["items"])
    return {k: node[k] for k in sorted(node)}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema: dict[str, Any] = _structural(_resolve(raw, raw.get("$defs", {})))
    return schema


Column = tuple[str, str, str, int]  # name, type, JSON path, priority (0: always shown)


def crd_document(*, kind: str, plural: str, singular: str, short_names: list[str], description: str,
                 columns: list[Column], spec_schema: dict[str, Any], status_schema: dict[str, Any],
                 subresources: dict[str, Any]) -> dict[str, Any]:
    """A namespaced kuberl.io CustomResourceDefinition of one served and stored version."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{types.GROUP}",
            "labels": {APP_LABEL: APP_NAME, "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": types.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": ["kuberl"],
            },
            "versions": [
                {
                    "name": types.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": [
                        {"name": n, "type": t, "jsonPath": p, **({"priority": pr} if pr else {})}
                        for n, t, p, pr in columns
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def build_crd() -> dict[str, Any]:
    columns: list[Column] = [
        ("Phase", "string", ".status.phase", 0),
        ("Algorithm", "string", ".spec.algorithm", 0),
        ("Env", "string", ".spec.env.id", 0),
        ("Iteration", "integer", ".status.iteration", 0),
        ("Timesteps", "integer", ".status.timesteps", 0),
        ("Return", "number", ".status.episodeReturnMean", 0),
        ("Eval", "number", ".status.evaluationReturnMean", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
        ("Checkpoint", "string", ".status.lastCheckpoint", 1),
    ]
    return crd_document(
        kind=types.KIND, plural=types.PLURAL, singular=types.SINGULAR, short_names=types.SHORT_NAMES,
        description="An RLExperiment trains a reinforcement-learning policy on a Ray cluster.",
        columns=columns, spec_schema=model_schema(types.RLExperimentSpec),
        status_schema=model_schema(types.RLExperimentStatus),
        subresources={
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.workers.replicas",
                "statusReplicasPath": ".status.workers",
                "labelSelectorPath": ".status.selector",
            },
        },
    )


def generated_file(crd: dict[str, Any], source: str) -> str:
    """crds/'s file: the CRD behind a header naming the module it is generated from."""
    return f"# Generated from {source} by `make crds`. Do not edit.\n" + yaml.safe_dump(crd, sort_keys=False, width=120)


def chart_file(crd: dict[str, Any], source: str) -> str:
    """The chart's copy: the same CRD, behind the crds.install toggle and kept on uninstall."""
    crd = copy.deepcopy(crd)
    # Helm keeps the CRD on uninstall; Argo CD ignores that annotation and needs its own,
    # or deleting the Application would delete the CRD and every resource of its kind with it.
    crd["metadata"]["annotations"] = {
        "helm.sh/resource-policy": "keep",
        "argocd.argoproj.io/sync-options": "Delete=false",
    }
    body = yaml.safe_dump(crd, sort_keys=False, width=120)
    return (
        f"# Generated from {source} by `make crds`. Do not edit.\n"
        "{{- if .Values.crds.install }}\n" + body + "{{- end }}\n"
    )


def write_generated(root: Path, crd_file: Path, chart_crd: Path, crd: dict[str, Any], source: str) -> str:
    """`make crds`: write crds/'s file and, where the chart is, its copy; what was written, as a line."""
    (root / crd_file).parent.mkdir(parents=True, exist_ok=True)
    (root / crd_file).write_text(generated_file(crd, source))
    written = [root / crd_file]
    if (root / chart_crd).parent.is_dir():
        (root / chart_crd).write_text(chart_file(crd, source))
        written.append(root / chart_crd)
    return "wrote " + " and ".join(str(path) for path in written)


def render_crd() -> str:
    return generated_file(build_crd(), SOURCE)


def render_chart_crd() -> str:
    return chart_file(build_crd(), SOURCE)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(write_generated(Path(argv[0]) if argv else Path("."), _CRD_FILE, _CHART_CRD, build_crd(), SOURCE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
