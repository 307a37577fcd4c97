"""The run record: the resolved manifest with every default, versions, machine, every seed; the seeds it
lists are the ones the workers really reset their envs with; `kuberl info`'s text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from kuberl.api.validation import load_manifest
from kuberl.trainer.run.run_record import (
    build_record,
    cpu_model,
    env_package,
    probe_environment,
    read_records,
    record_key,
    record_text,
    seeds,
    write_record,
)
from kuberl.trainer.storage.local import LocalStore
from kuberl_testing.manifests import experiment_manifest

X86_CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\nflags\t: fpu\n"
ARM_CPUINFO = "processor\t: 0\nBogoMIPS\t: 48.00\nCPU part\t: 0xd0c\n\nModel\t: Raspberry Pi 5 Model B Rev 1.0\n"


def experiment(**spec):
    return load_manifest(experiment_manifest("rec", stop={"iterations": 1}, **spec))


def test_cpu_model_from_cpuinfo():
    assert cpu_model(X86_CPUINFO) == "AMD EPYC 9654 96-Core Processor"
    assert cpu_model(ARM_CPUINFO) == "Raspberry Pi 5 Model B Rev 1.0"
    assert cpu_model("processor : 0\n") is None


def test_the_record_holds_the_resolved_manifest_versions_machine_and_seeds():
    exp = experiment(rollouts={"workers": 2, "envsPerWorker": 3, "fragmentLength": 16},
                     evaluation={"interval": 5, "episodes": 4})
    environment = {"versions": {"kuberl": "0.1.0", "python": "3.11.7"}, "machine": {"cpuCount": 2}}
    record = build_record(exp, environment, attempt=2, run_uri="s3://b/p/ns/rec", image="reg/trainer:1",
                          started_at=0.0, namespace="ns")
    assert (record["attempt"], record["namespace"], record["run"], record["image"]) == (2, "ns", "s3://b/p/ns/rec",
                                                                                        "reg/trainer:1")
    assert record["startedAt"] == "1970-01-01T00:00:00Z"
    assert record["versions"] == environment["versions"] and record["machine"] == environment["machine"]
    spec = record["manifest"]["spec"]
    # Defaults the manifest never set: the hyperparameters' and the spec's own.
    assert spec["config"]["seed"] == 3 and spec["config"]["lr"] == 0.002 and spec["config"]["gamma"] == 0.99
    assert spec["checkpoint"]["keep"] == 5 and spec["head"]["memory"] == "4Gi" and spec["backoffLimit"] == 3
    table = record["seeds"]
    assert [w["index"] for w in table["workers"]] == [1, 2]
    assert [(w["envSeed"], w["envs"]) for w in table["workers"]] == [(1003, 3), (2003, 3)]
    assert table["workers"][0]["policySeed"] != table["workers"][1]["policySeed"]
    assert table["evaluationEpisodes"] == [4_198_403, 4_198_406] and table["replayShards"] == []
    json.dumps(record)  # all of it is JSON


def test_an_unseeded_run_says_it_cannot_repeat():
    table = seeds(None, workers=0, envs_per_worker=4, shards=0, evaluation_episodes=0)
    assert table["seed"] is None and "fresh entropy" in table["note"] and "workers" not in table


def test_the_listed_env_seeds_are_the_ones_the_worker_reset_with():
    from kuberl.trainer.algorithms.config import algorithm_config_for
    from kuberl.trainer.sampling.envs import make_vector_env

    exp = experiment(rollouts={"workers": 0, "envsPerWorker": 3, "fragmentLength": 8})
    record = build_record(exp, {"versions": {}, "machine": {}}, attempt=0, run_uri="file:///r", image=None,
                          started_at=0.0)
    (worker,) = record["seeds"]["workers"]
    algo = algorithm_config_for(exp).build()
    try:
        reset_with = np.concatenate([group.raw_obs for group in algo.sampler.local_worker.groups])
        expected, _ = make_vector_env("CartPole-v1", num_envs=worker["envs"]).reset(seed=worker["envSeed"])
        np.testing.assert_array_equal(reset_with, expected)
        unseeded, _ = make_vector_env("CartPole-v1", num_envs=worker["envs"]).reset(seed=worker["envSeed"] + 1)
        assert not np.array_equal(reset_with, unseeded)  # the check can fail
    finally:
        algo.stop()


def test_probe_names_versions_machine_and_the_env_package():
    found = probe_environment("CartPole-v1")
    versions = found["versions"]
    assert versions["kuberl"] and versions["torch"] and versions["gymnasium"] and versions["ray"]
    assert versions["python"].count(".") == 2
    assert versions["env"]["distribution"] == "gymnasium" and versions["env"]["version"] == versions["gymnasium"]
    assert found["machine"]["cpuCount"] >= 1 and isinstance(found["machine"]["gpus"], list)
    assert env_package("kuberl_testing.pixel_env:PixelQuadrant")["module"] == "kuberl_testing.pixel_env"
    assert env_package("ale_py:ALE/Pong-v5")["distribution"] in ("ale-py", "ale_py", None)


def test_written_once_per_attempt_and_shown_as_text(tmp_path: Path):
    store = LocalStore(tmp_path)
    exp = experiment()
    write_record(store, exp, attempt=0)
    write_record(store, exp, attempt=1, namespace="research")
    assert sorted(p.name for p in (tmp_path / "run-record").iterdir()) == ["attempt-000.json", "attempt-001.json"]
    assert record_key(12) == "run-record/attempt-012.json"
    records = read_records(store)
    assert [r["attempt"] for r in records] == [0, 1]
    text = record_text(records[-1], attempts=2)
    assert "experiment: rec in namespace research, attempt 1 (records of 2 attempt(s))" in text
    assert "versions:   kuberl " in text and "torch " in text and "gymnasium " in text
    assert "worker 0: env seed 3 (4 envs), policy seed " in text
    manifest_yaml = text.split("every default filled in):\n", 1)[1]
    assert yaml.safe_load("\n".join(line[2:] for line in manifest_yaml.splitlines()))["spec"]["config"]["lr"] == 0.002


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_machine_names_every_gpu_torch_sees():
    gpus = probe_environment("CartPole-v1")["machine"]["gpus"]
    assert gpus == [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] and gpus[0]
