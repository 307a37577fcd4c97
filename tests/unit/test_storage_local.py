"""LocalStore: atomic puts, listing, deletion, URIs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kuberl.trainer.storage import NotFound, StorageError, open_store
from kuberl.trainer.storage.local import TEMP_PREFIX, LocalStore, path_from_uri


def test_put_get_list_delete(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "run")
    store.put_bytes("checkpoints/000001/model.pt", b"abc")
    store.put_bytes("results.jsonl", b"{}\n")
    assert store.get_bytes("checkpoints/000001/model.pt") == b"abc"
    assert store.list() == ["checkpoints/000001/model.pt", "results.jsonl"]
    assert store.list("checkpoints/") == ["checkpoints/000001/model.pt"]
    assert store.sizes("checkpoints/") == {"checkpoints/000001/model.pt": 3}
    store.delete("results.jsonl")
    store.delete("results.jsonl")  # missing is fine
    assert not store.exists("results.jsonl")
    with pytest.raises(NotFound):
        store.get_bytes("results.jsonl")
    store.delete_prefix("checkpoints/000001/")
    assert store.list() == []
    assert not (tmp_path / "run" / "checkpoints" / "000001").exists()


def test_put_replaces_whole_object_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStore(f"file://{tmp_path}")
    store.put_bytes("a/b", b"old")
    store.put_bytes("a/b", b"new contents")
    assert store.get_bytes("a/b") == b"new contents"
    assert not [p for p in (tmp_path / "a").iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_temp_files_are_hidden_from_listings(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put_bytes("x/y", b"1")
    (tmp_path / "x" / f"{TEMP_PREFIX}abc").write_bytes(b"torn")
    assert store.list() == ["x/y"]


def test_put_file_and_get_file(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"\x00" * 5000)
    store = LocalStore(tmp_path / "store")
    store.put_file("f.bin", src)
    store.get_file("f.bin", tmp_path / "out" / "copy.bin")
    assert (tmp_path / "out" / "copy.bin").read_bytes() == src.read_bytes()
    with pytest.raises(NotFound):
        store.get_file("missing", tmp_path / "x")


def test_uri_forms(tmp_path: Path) -> None:
    assert path_from_uri(f"file://{tmp_path}/r") == tmp_path / "r"
    assert path_from_uri(str(tmp_path / "r")) == tmp_path / "r"
    store = open_store(f"file://{tmp_path}/r")
    assert isinstance(store, LocalStore)
    assert store.url("checkpoints/000001") == f"file://{tmp_path}/r/checkpoints/000001"


def test_keys_cannot_escape_the_root(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with pytest.raises(StorageError):
        store.put_bytes("../evil", b"x")


def test_check_fails_for_unwritable_location(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError, match="file"):
        LocalStore(blocker / "run").check()
    LocalStore(tmp_path / "ok").check()
    assert (tmp_path / "ok").is_dir()
