"""Checkpoints of the Python API: what `Algorithm.save()` writes, the kuberl commands read; what `restore()` loads
must have been trained with the same networks and observation filter."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kuberl.api.field_errors import ManifestError
from kuberl.api.validation import load_manifest
from kuberl.trainer.algorithms.ppo import PPOConfig
from kuberl.trainer.run.driver import TrainOptions, run_training
from kuberl_testing.manifests import experiment_manifest

pytestmark = pytest.mark.timeout(300)


def kuberl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd)


def test_kuberl_commands_read_what_save_wrote(tmp_path: Path) -> None:
    config = (PPOConfig().environment("CartPole-v1").rollouts(workers=0, envs_per_worker=4, fragment_length=64)
              .training(num_epochs=2, minibatch_size=64).debugging(seed=1))  # no stop criteria: a Python loop
    with config.build() as algo:
        for _ in range(2):
            result = algo.train()
        algo.save(str(tmp_path / "runs" / "cartpole"))
    assert result["episodeReturnMean"] is not None

    evaluated = kuberl("evaluate", "runs/cartpole", "--episodes", "2", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "ppo on CartPole-v1: 2 episodes" in evaluated.stdout
    exported = kuberl("export", "runs/cartpole", "--format", "onnx", "--out", "policy.onnx", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "policy.onnx").stat().st_size > 0

    listed = kuberl("checkpoints", "runs/cartpole", "-o", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["iteration"] == 2 and row["episodeReturnMean"] == pytest.approx(result["episodeReturnMean"])
    info = kuberl("info", "runs/cartpole", cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    assert "CartPole-v1" in info.stdout


def _train_with_filter(root: Path) -> None:
    experiment = load_manifest(experiment_manifest("filtered", config={"observationFilter": "mean_std"},
                                                   stop={"iterations": 1}))
    out = io.StringIO()
    assert run_training(experiment, TrainOptions(storage_uri=f"file://{root}", quiet=True, out=out)).exit_code == 0


def test_restore_refuses_a_checkpoint_of_another_observation_filter_or_network(tmp_path: Path) -> None:
    _train_with_filter(tmp_path)
    plain = PPOConfig().environment("CartPole-v1").rollouts(workers=0, envs_per_worker=4, fragment_length=32)
    with plain.build() as algo, pytest.raises(ManifestError) as refused:
        algo.restore(str(tmp_path / "filtered"))
    assert [error.path for error in refused.value.errors] == ["spec.config.observationFilter"]
    assert "'none' here but 'mean_std'" in str(refused.value)
    assert algo.iteration == 0

    wider = plain.copy().training(observation_filter="mean_std", hidden=[128, 128], activation="relu")
    with wider.build() as algo, pytest.raises(ManifestError) as refused:
        algo.restore(str(tmp_path / "filtered"))
    assert [error.path for error in refused.value.errors] == ["spec.config.hidden", "spec.config.activation"]

    with plain.copy().training(observation_filter="mean_std").build() as algo:
        algo.restore(str(tmp_path / "filtered"))
        assert algo.iteration == 1 and algo.obs_filter.get_state().count > 0
