"""The JSON documents a run writes once and reads back (the run record, the task defaults' record in the first
results line) are typed (TypedDict): each type names every key the writer puts in the document, the documents
already on disk (tests/fixtures/results) fit them, and a record written is read back as it was, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberl.api.validation import load_manifest, validate_document
from kuberl.trainer.cpu import CpuSummary, cpu_summary
from kuberl.trainer.iteration_result import IterationResult
from kuberl.trainer.learning.device import Bf16Record, resolve_bf16
from kuberl.trainer.run.run_record import (
    Environment,
    EnvPackage,
    Machine,
    RunRecord,
    Seeds,
    Versions,
    WorkerSeeds,
    read_records,
    record_key,
    write_record,
)
from kuberl.trainer.run.task_defaults import DefaultsRecord, MachineChoices, resolve_task_defaults
from kuberl.trainer.storage.checkpoints import BEST, BestPointer, read_best_pointer, write_best
from kuberl.trainer.storage.local import LocalStore
from kuberl_testing.manifests import experiment_manifest

RESULTS = Path(__file__).parents[1] / "fixtures" / "results"


def fits(document: dict[str, Any], typed: Any) -> None:
    """Every key of `document` is one `typed` names, and every key it requires is there."""
    assert set(document) <= set(typed.__annotations__), set(document) - set(typed.__annotations__)
    assert typed.__required_keys__ <= set(document), typed.__required_keys__ - set(document)


def test_a_run_record_is_its_type_key_for_key_and_reads_back_byte_for_byte(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    experiment = load_manifest(experiment_manifest("rec", stop={"iterations": 1}, rollouts={"workers": 2},
                                                   evaluation={"interval": 5, "episodes": 4}))
    bf16 = resolve_bf16("auto", "cpu", cpu_flags=["avx2"]).record()
    record = write_record(store, experiment, attempt=1, namespace="ns", learner_bf16=bf16)
    assert list(record) == list(RunRecord.__annotations__)  # in the file's order
    fits(record["versions"], Versions)  # type: ignore[arg-type]
    fits(record["versions"]["env"], EnvPackage)  # type: ignore[arg-type]
    fits(record["machine"], Machine)  # type: ignore[arg-type]
    fits(record["seeds"], Seeds)  # type: ignore[arg-type]
    for worker in record["seeds"]["workers"]:
        fits(worker, WorkerSeeds)  # type: ignore[arg-type]
    fits({"versions": record["versions"], "machine": record["machine"], "learner": record["learner"]}, Environment)
    fits(record["learner"]["bf16"], Bf16Record)  # type: ignore[arg-type]
    on_disk = store.get_bytes(record_key(1))
    assert on_disk == json.dumps(record, indent=1).encode()
    (back,) = read_records(store)
    assert back == record and json.dumps(back, indent=1).encode() == on_disk


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.jsonl")), ids=lambda p: p.stem)
def test_the_defaults_of_results_on_disk_fit_their_type_and_go_back_as_they_were(path: Path) -> None:
    text = path.read_text().splitlines()[0]
    first = json.loads(text)
    defaults = first["defaults"]
    fits(defaults, DefaultsRecord)
    fits(defaults["machine"], MachineChoices)
    if "bf16" in defaults["machine"]:
        fits(defaults["machine"]["bf16"], Bf16Record)
    assert json.dumps(IterationResult.from_json(first).to_json()) == json.dumps(first)


def test_the_defaults_a_run_chooses_fit_their_type() -> None:
    document = yaml.safe_load(experiment_manifest("img", env="ALE/Pong-v5", stop={"iterations": 1}))
    document["spec"]["env"]["preprocessing"] = "atari"
    document["spec"]["rollouts"] = {"workers": 0}
    experiment = validate_document(document)
    _, defaults = resolve_task_defaults(experiment, measure=False, cores=4)
    assert defaults is not None
    record = defaults.record()
    fits(record, DefaultsRecord)  # type: ignore[arg-type]
    fits(record["machine"], MachineChoices)  # type: ignore[arg-type]
    assert {"trainBatch", "minibatches", "chosen", "bf16"} <= set(record["machine"])  # image PPO on 4 cores


def test_the_cpu_summary_is_its_type() -> None:
    assert list(cpu_summary("model name\t: X\nflags\t: avx2 avx512_bf16\n")) == list(CpuSummary.__annotations__)


def test_the_best_pointer_reads_back_as_written(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    write_best(store, 3, {"model.pt": b"weights"}, timesteps=300, score=42.5, attempt=2)
    pointer = read_best_pointer(store)
    assert pointer is not None
    assert list(pointer) == list(BestPointer.__annotations__)
    assert json.dumps(pointer).encode() == store.get_bytes(BEST)  # key for key, in the file's order
    assert (pointer["checkpoint"], pointer["iteration"], pointer["evaluationReturnMean"]) == ("000003", 3, 42.5)
