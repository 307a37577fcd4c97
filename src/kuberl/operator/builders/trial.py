"""A sweep's trial as an RLExperiment: the template with the trial's values, owned by the RLSweep."""

from __future__ import annotations

import json
from typing import Any

from kuberl.api.contract import APP_LABEL, APP_NAME
from kuberl.api.sweep_types import KIND as SWEEP_KIND
from kuberl.api.sweep_types import RLSweepSpec, TrialRecord
from kuberl.api.types import API_VERSION, KIND
from kuberl.operator import names
from kuberl.sweep.plan import is_pbt, trial_runs

SWEEP_LABEL = "kuberl.io/sweep"
TRIAL_LABEL = "kuberl.io/trial"
PARAMS_ANNOTATION = "kuberl.io/trial-params"
ROUND_LABEL = "kuberl.io/pbt-round"

def sweep_selector(sweep: str) -> str:
    return f"{APP_LABEL}={APP_NAME},{SWEEP_LABEL}={names.experiment_label(sweep)}"


def build_trial(sweep: dict[str, Any], spec: RLSweepSpec, record: TrialRecord, run: int = 0) -> dict[str, Any]:
    """The trial's run `run` (a seed; with pbt, the round) as kuberl.sweep.plan makes it, as an RLExperiment
    whose ownerReference makes it go with the sweep."""
    meta = sweep["metadata"]
    pbt = is_pbt(spec)
    planned = trial_runs(spec, record, run)[0] if pbt else trial_runs(spec, record)[run]
    body_spec = planned.spec
    labels = {APP_LABEL: APP_NAME, SWEEP_LABEL: names.experiment_label(meta["name"]), TRIAL_LABEL: str(record.number)}
    if pbt:
        labels[ROUND_LABEL] = str(run)
    if spec.suspend:
        body_spec["suspend"] = True
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": planned.name,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {PARAMS_ANNOTATION: json.dumps(record.params, sort_keys=True)},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": SWEEP_KIND, "name": meta["name"],
                                 "uid": meta["uid"], "controller": True}],
        },
        "spec": body_spec,
    }
