"""Checkpoint compatibility: each manifest records the checkpoint format and the kuberl version; a format
this kuberl cannot read is refused with both versions named (not skipped for an older checkpoint), and a
manifest from before these fields loads as format 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kuberl import __version__
from kuberl.trainer.storage.checkpoints import (
    IncompatibleCheckpoint,
    load_checkpoint,
    read_checkpoint,
    restore_latest,
    write_checkpoint,
)
from kuberl.trainer.storage.checkpoints.protocol import FORMAT_VERSION, incompatibility
from kuberl.trainer.storage.local import LocalStore


def rewrite_manifest(root: Path, iteration: int, **changes) -> None:
    path = root / "checkpoints" / f"{iteration:06d}" / "manifest.json"
    manifest = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            manifest.pop(key, None)
        else:
            manifest[key] = value
    path.write_text(json.dumps(manifest))


def test_the_manifest_records_format_and_kuberl_version(tmp_path: Path):
    store = LocalStore(tmp_path)
    write_checkpoint(store, 1, {"model.pt": b"weights"}, timesteps=10)
    manifest = json.loads((tmp_path / "checkpoints" / "000001" / "manifest.json").read_text())
    assert manifest["format"] == FORMAT_VERSION and manifest["kuberl"] == __version__


def test_a_newer_format_is_refused_naming_both_versions(tmp_path: Path):
    store = LocalStore(tmp_path)
    write_checkpoint(store, 1, {"model.pt": b"old"}, timesteps=10)
    write_checkpoint(store, 2, {"model.pt": b"new"}, timesteps=20)
    rewrite_manifest(tmp_path, 2, format=FORMAT_VERSION + 1, kuberl="9.0.0")
    with pytest.raises(IncompatibleCheckpoint) as refused:
        restore_latest(store)  # refuses: it does not quietly fall back to iteration 1
    message = str(refused.value)
    assert "kuberl 9.0.0" in message and f"format {FORMAT_VERSION + 1}" in message
    assert f"kuberl {__version__} reads format {FORMAT_VERSION}" in message and "000002" in message
    with pytest.raises(IncompatibleCheckpoint):
        load_checkpoint(store.url("checkpoints/000002"))
    files, info = load_checkpoint(store.url("checkpoints/000001"))
    assert files == {"model.pt": b"old"} and info.iteration == 1


def test_a_manifest_without_the_fields_still_loads(tmp_path: Path):
    store = LocalStore(tmp_path)
    info = write_checkpoint(store, 3, {"model.pt": b"w"}, timesteps=30)
    rewrite_manifest(tmp_path, 3, format=None, kuberl=None)
    assert read_checkpoint(store, info) == {"model.pt": b"w"}


def test_incompatibility_wording():
    assert incompatibility({"format": FORMAT_VERSION}, "u") is None
    assert incompatibility({}, "u") is None
    too_old = incompatibility({"format": 0, "kuberl": "0.0.1"}, "file:///r/checkpoints/000001")
    assert too_old is not None and "kuberl 0.0.1" in too_old and "the kuberl version that wrote it" in too_old
    unknown = incompatibility({"format": "x"}, "u")
    assert unknown is not None and "an unknown kuberl version" in unknown
