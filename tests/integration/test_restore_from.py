"""spec.checkpoint.restoreFrom: a run starts from another run's checkpoint with its own hyperparameters."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

from kuberl.api.validation import ManifestError, load_manifest
from kuberl.trainer.algorithms.config import algorithm_config_for
from kuberl.trainer.run.driver import TrainOptions, run_training
from kuberl.trainer.run.restore_from import restore_from
from kuberl.trainer.storage import open_store
from kuberl.trainer.storage.checkpoints import latest_checkpoint
from kuberl_testing.manifests import experiment_manifest

pytestmark = pytest.mark.timeout(300)


def _experiment(name: str, lr: float, iterations: int, algorithm: str = "dqn", restore: str | None = None):
    config = {"lr": lr, **({"learningStarts": 32, "trainBatchSize": 16} if algorithm == "dqn" else {})}
    checkpoint = {"everyIterations": 1, "keep": 5, **({"restoreFrom": restore} if restore else {})}
    return load_manifest(experiment_manifest(name, algorithm=algorithm, config=config,
                                             stop={"iterations": iterations}, checkpoint=checkpoint))


def _train(experiment, root: Path) -> str:
    out = io.StringIO()
    summary = run_training(experiment, TrainOptions(storage_uri=f"file://{root}", quiet=True, out=out))
    assert summary.exit_code == 0, out.getvalue()
    return out.getvalue()


def _results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]


def test_restore_loads_weights_and_keeps_the_new_learning_rate(tmp_path: Path) -> None:
    _train(_experiment("donor", lr=0.01, iterations=3), tmp_path)
    donor_store = open_store(f"file://{tmp_path}/donor")
    donor = latest_checkpoint(donor_store)
    assert donor is not None and donor.iteration == 3

    algo = algorithm_config_for(_experiment("child", lr=0.0005, iterations=5)).build()
    try:
        fresh = {k: v.clone() for k, v in algo.learner.online.state_dict().items()}
        info = restore_from(algo, f"file://{tmp_path}/donor")
        assert info.iteration == 3 and algo.iteration == 3 and algo.timesteps == donor.timesteps
        loaded = algo.learner.online.state_dict()
        assert any(not torch.equal(fresh[k], loaded[k]) for k in fresh), "the donor's weights were not loaded"
        assert algo.learner.optimizer.param_groups[0]["lr"] == 0.0005  # not the donor's 0.01
        assert algo.learner.optimizer.state, "the optimizer's moments were not loaded"
    finally:
        algo.stop()


def test_a_run_starts_from_the_checkpoint_then_resumes_from_its_own(tmp_path: Path) -> None:
    _train(_experiment("donor", lr=0.01, iterations=2, algorithm="ppo"), tmp_path)
    child = _experiment("child", lr=0.0005, iterations=4, algorithm="ppo", restore=f"file://{tmp_path}/donor")
    out = _train(child, tmp_path)
    assert "starting from file://" in out and "iteration 2" in out
    results = _results(tmp_path / "child")
    assert [r["iteration"] for r in results] == [3, 4]  # the counters go on from the donor's
    assert results[0]["timesteps"] > _results(tmp_path / "donor")[-1]["timesteps"]

    # A rerun with a longer budget resumes from the child's own checkpoint, never the donor's again.
    child = _experiment("child", lr=0.0005, iterations=5, algorithm="ppo", restore=f"file://{tmp_path}/donor")
    out = _train(child, tmp_path)
    assert "resuming from" in out and "starting from" not in out
    assert [r["iteration"] for r in _results(tmp_path / "child")] == [3, 4, 5]


def test_restore_from_another_algorithm_names_the_field(tmp_path: Path) -> None:
    _train(_experiment("donor", lr=0.01, iterations=1, algorithm="ppo"), tmp_path)
    algo = algorithm_config_for(_experiment("child", lr=0.001, iterations=2)).build()
    try:
        with pytest.raises(ManifestError, match=r"spec.checkpoint.restoreFrom: .* checkpoint of 'ppo', not 'dqn'"):
            restore_from(algo, f"file://{tmp_path}/donor")
        with pytest.raises(ManifestError, match=r"spec.checkpoint.restoreFrom: .*no complete checkpoint"):
            restore_from(algo, f"file://{tmp_path}/nothing-here")
    finally:
        algo.stop()
