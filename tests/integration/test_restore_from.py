"""spec.checkpoint.restoreFrom: a run starts from another run's checkpoint with its own hyperparameters."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

from kuberl.api.field_errors import ManifestError
from kuberl.api.validation import load_manifest
from kuberl.trainer.algorithms.config import algorithm_config_for
from kuberl.trainer.run.driver import TrainOptions, run_training
from kuberl.trainer.run.restore_from import restore_from
from kuberl.trainer.storage import open_store
from kuberl.trainer.storage.base import StorageError
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


def _multi_agent(name: str, lr: float, late_lr: float | None = None):
    late = {"name": "late", "agents": ["late_0"], **({"config": {"lr": late_lr}} if late_lr else {})}
    return load_manifest(experiment_manifest(
        name, env="kuberl_testing.multi_agent_envs:relay_env", config={"lr": lr, "annealLr": False},
        rollouts={"workers": 0, "envsPerWorker": 2, "fragmentLength": 16}, stop={"iterations": 5},
        multiAgent={"policies": [{"name": "runners", "agents": ["runner_*"]}, late]}))


def _policy_rates(algo) -> dict[str, float]:
    return {name: learner.optimizer.param_groups[0]["lr"] for name, learner in algo.learners.items()}


def test_restore_keeps_each_policys_own_learning_rate_in_a_multi_agent_run(tmp_path: Path) -> None:
    with algorithm_config_for(_multi_agent("donor", lr=0.01)).build() as donor:
        donor.train()
        uri = donor.save(tmp_path / "donor")
    with algorithm_config_for(_multi_agent("member", lr=0.0005, late_lr=0.0002)).build() as member:
        restore_from(member, uri)
        assert _policy_rates(member) == {"runners": 0.0005, "late": 0.0002}  # not the donor's 0.01
        assert all(learner.optimizer.state for learner in member.learners.values()), "moments not loaded"
        member.train()
        assert _policy_rates(member) == {"runners": 0.0005, "late": 0.0002}


def test_restore_from_reads_s3_in_the_storage_region(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kuberl.trainer.storage.checkpoints import protocol

    opened: list[dict] = []

    def recording_store(uri: str, **options):
        opened.append({"uri": uri, **options})
        raise StorageError("recorded")

    monkeypatch.setattr(protocol, "open_store", recording_store)
    experiment = load_manifest(experiment_manifest(
        "child", stop={"iterations": 1}, checkpoint={"restoreFrom": "s3://runs/donor/checkpoints/000010"},
        storage={"uri": "s3://runs/child", "endpoint": "http://127.0.0.1:9", "region": "eu-central-1"}))
    with pytest.raises(ManifestError, match="spec.checkpoint.restoreFrom: recorded"):
        run_training(experiment, TrainOptions(storage_uri=f"file://{tmp_path}", quiet=True, out=io.StringIO()))
    assert opened == [{"uri": "s3://runs/donor", "endpoint": "http://127.0.0.1:9", "region": "eu-central-1"}]


def test_the_apex_learner_actor_keeps_the_new_rate_and_takes_learner_threads(tmp_path: Path, ray_session) -> None:
    def apex(lr: float, threads: int | None = None):
        return algorithm_config_for(load_manifest(experiment_manifest(
            "apex", algorithm="apex-dqn", config={"lr": lr, "learningStarts": 100, "minIterationSeconds": 0.5},
            rollouts={"workers": 1, "envsPerWorker": 2, "fragmentLength": 16}, replay={"capacity": 2000},
            stop={"iterations": 1}, **({"learner": {"threads": threads}} if threads else {})))).build()

    def in_actor(algo, read):
        return ray_session.get(algo.learner.__ray_call__.remote(lambda actor: read(actor.learner)))

    with apex(0.001) as donor:
        donor.train()
        uri = donor.save(tmp_path / "donor")
    with apex(0.0001, threads=2) as member:
        assert in_actor(member, lambda _: torch.get_num_threads()) == 2  # spec.learner.threads
        restore_from(member, uri)
        assert in_actor(member, lambda learner: learner.optimizer.param_groups[0]["lr"]) == 0.0001
