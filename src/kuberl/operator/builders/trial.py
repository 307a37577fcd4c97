"""A sweep's trial as an RLExperiment: the template with the trial's values, owned by the RLSweep."""

from __future__ import annotations

import json
from typing import Any

from kuberl.api.contract import APP_LABEL, APP_NAME
from kuberl.api.sweep_types import KIND as SWEEP_KIND
from kuberl.api.sweep_types import RLSweepSpec, TrialRecord
from kuberl.api.sweep_validation import trial_spec
from kuberl.api.types import API_VERSION, KIND
from kuberl.operator import names
from kuberl.operator.sweep_pbt import round_end, segment_name

SWEEP_LABEL = "kuberl.io/sweep"
TRIAL_LABEL = "kuberl.io/trial"
PARAMS_ANNOTATION = "kuberl.io/trial-params"
ROUND_LABEL = "kuberl.io/pbt-round"


def run_names(spec: RLSweepSpec, record: TrialRecord, pbt_round: int = 0) -> list[str]:
    """The RLExperiments of one trial: its name, or NAME-sK for each of seedsPerTrial seeds; with pbt
    the member's run of the current round, NAME-rRR."""
    if spec.search.algorithm == "pbt":
        return [segment_name(record, pbt_round)]
    if spec.seeds_per_trial == 1:
        return [record.name]
    return [f"{record.name}-s{k}" for k in range(spec.seeds_per_trial)]


def seed_of(spec: RLSweepSpec, k: int) -> int | None:
    if spec.seeds_per_trial == 1:
        return None
    base = spec.template.config.get("seed")
    return (base if isinstance(base, int) else 0) + k


def sweep_selector(sweep: str) -> str:
    return f"{APP_LABEL}={APP_NAME},{SWEEP_LABEL}={names.experiment_label(sweep)}"


def build_trial(sweep: dict[str, Any], spec: RLSweepSpec, record: TrialRecord, run: int = 0) -> dict[str, Any]:
    """The trial's run `run` (a seed; with pbt, the round): an RLExperiment whose ownerReference makes it go
    with the sweep. A pbt member's run stops at the round's end and starts from `record.restored_from`."""
    meta = sweep["metadata"]
    pbt = spec.search.algorithm == "pbt"
    body_spec = trial_spec(spec.template.to_manifest(), record.params, None if pbt else seed_of(spec, run))
    labels = {APP_LABEL: APP_NAME, SWEEP_LABEL: names.experiment_label(meta["name"]), TRIAL_LABEL: str(record.number)}
    if pbt:
        body_spec.setdefault("stop", {})["timesteps"] = round_end(spec, run)
        if record.restored_from is not None:
            body_spec.setdefault("checkpoint", {})["restoreFrom"] = record.restored_from
        labels[ROUND_LABEL] = str(run)
    if spec.suspend:
        body_spec["suspend"] = True
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": run_names(spec, record, run)[0] if pbt else run_names(spec, record)[run],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {PARAMS_ANNOTATION: json.dumps(record.params, sort_keys=True)},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": SWEEP_KIND, "name": meta["name"],
                                 "uid": meta["uid"], "controller": True}],
        },
        "spec": body_spec,
    }
