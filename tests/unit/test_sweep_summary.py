"""kuberl.sweep.summary: the sweep's summary.json and summary.png."""

from __future__ import annotations

import json
import warnings

import yaml

from kuberl.api.sweep_types import SweepPhase, TrialRecord, TrialState
from kuberl.api.sweep_validation import validate_sweep_document
from kuberl.sweep.search import Outcome, SweepState
from kuberl.sweep.summary import write_summary

SWEEP = """\
apiVersion: kuberl.io/v1alpha1
kind: RLSweep
metadata: {name: s}
spec:
  template: {algorithm: ppo, env: {id: CartPole-v1}, stop: {timesteps: 1000}}
  parameters: [{path: config.lr, type: float, low: 0.0001, high: 0.003}]
"""


def test_a_sweep_without_a_single_value_plots_without_a_warning(tmp_path):
    """Every trial failed: nothing to label, and matplotlib's "No artists with labels" warning would follow the
    sweep's own failure line."""
    spec = validate_sweep_document(yaml.safe_load(SWEEP)).spec
    state = SweepState(trials=[TrialRecord(number=n, name=f"s-t00{n}", params={"config.lr": 0.001},
                                           state=TrialState.FAILED) for n in range(2)])
    ended = Outcome(SweepPhase.FAILED, "NoTrialSucceeded", "none of 2 trials succeeded")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_summary(tmp_path, "s", spec, state, ended, {}, 1.0)
    assert (tmp_path / "summary.png").stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["failed"] == 2
