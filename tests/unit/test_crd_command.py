"""`kuberl crd`: both CRDs as one YAML stream, or one with --kind, each as `make crds` writes it."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import yaml

from kuberl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def crd_output(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["crd", *args]) == 0
    return out.getvalue()


def test_kuberl_crd_prints_both_crds_as_one_stream() -> None:
    documents = list(yaml.safe_load_all(crd_output()))
    assert [d["spec"]["names"]["kind"] for d in documents] == ["RLExperiment", "RLSweep"]
    assert documents[0] == yaml.safe_load((ROOT / "crds" / "rlexperiment.yaml").read_text())
    assert documents[1] == yaml.safe_load((ROOT / "crds" / "rlsweep.yaml").read_text())


def test_kuberl_crd_kind_prints_one() -> None:
    assert crd_output("--kind", "RLSweep") == (ROOT / "crds" / "rlsweep.yaml").read_text()
    assert [d["spec"]["names"]["kind"] for d in yaml.safe_load_all(crd_output("--kind", "RLExperiment"))] == [
        "RLExperiment"]
