"""The RLSweep CustomResourceDefinition, generated from sweep_types.py (`make crds` runs this module)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kuberl.api import sweep_types
from kuberl.api.crd import chart_file, crd_document, generated_file, model_schema, write_generated

# Categorical values are scalars of any type; a structural schema says so with an untyped node.
_ANY_SCALAR = {"x-kubernetes-preserve-unknown-fields": True}


def _spec_schema() -> dict[str, Any]:
    schema = model_schema(sweep_types.RLSweepSpec)
    schema["properties"]["parameters"]["items"]["properties"]["values"]["items"] = dict(_ANY_SCALAR)
    return schema


# kubectl get rls: trial counts by state beside the phase (the headers are trial states, not phases).
SWEEP_COLUMNS = [
    ("Phase", "string", ".status.phase", 0),
    ("Search", "string", ".spec.search.algorithm", 0),
    ("Done", "integer", ".status.trialsSucceeded", 0),
    ("Running", "integer", ".status.trialsRunning", 0),
    ("Pruned", "integer", ".status.trialsPruned", 0),
    ("Failed", "integer", ".status.trialsFailed", 0),
    ("Best", "number", ".status.best.value", 0),
    ("Age", "date", ".metadata.creationTimestamp", 0),
    ("Metric", "string", ".spec.objective.metric", 1),
    ("Best-Trial", "string", ".status.best.name", 1),
]


def build_sweep_crd() -> dict[str, Any]:
    return crd_document(
        kind=sweep_types.KIND, plural=sweep_types.PLURAL, singular=sweep_types.SINGULAR,
        short_names=sweep_types.SHORT_NAMES,
        description="An RLSweep searches hyperparameters: it runs its template as RLExperiment trials with sampled "
                    "values and keeps the best.",
        columns=SWEEP_COLUMNS, spec_schema=_spec_schema(), status_schema=model_schema(sweep_types.RLSweepStatus),
        subresources={"status": {}},
    )


SOURCE = "src/kuberl/api/sweep_types.py"


def render_sweep_crd() -> str:
    return generated_file(build_sweep_crd(), SOURCE)


def render_sweep_chart_crd() -> str:
    """The chart's copy, kept on uninstall like the RLExperiment CRD (see kuberl.api.crd)."""
    return chart_file(build_sweep_crd(), SOURCE)


_CRD_FILE = Path("crds/rlsweep.yaml")
_CHART_CRD = Path("charts/kuberl/templates/crd-rlsweep.yaml")


def main(argv: list[str] | None = None) -> int:
    """`make crds`: crds/rlsweep.yaml and the chart's copy."""
    argv = sys.argv[1:] if argv is None else argv
    print(write_generated(Path(argv[0]) if argv else Path("."), _CRD_FILE, _CHART_CRD, build_sweep_crd(), SOURCE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
