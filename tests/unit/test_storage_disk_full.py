"""A full local disk: a failed append leaves results.jsonl whole, and the lines wait in memory.

/dev/full answers every write with ENOSPC, and RLIMIT_FSIZE (with SIGXFSZ ignored) makes a write
stop part-way with EFBIG: two real ways for the kernel to refuse a write, without filling a disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kuberl.trainer.storage.base import StorageError
from kuberl.trainer.storage.checkpoints import list_checkpoints, write_checkpoint
from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.run import RESULTS, RunStorage

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")


# A child process whose files may not grow past 40 bytes (SIGXFSZ ignored: EFBIG instead of death).
_LIMITED = """
import resource, signal, sys
from kuberl.trainer.storage.base import StorageError
from kuberl.trainer.storage.local import LocalStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (40, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
store = LocalStore({root!r})
try:
    {call}
except StorageError as e:
    print(e)
    sys.exit(3)
"""


def test_an_append_cut_short_by_a_file_size_limit_leaves_the_object_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_bytes(b'{"iteration":1}\n')
    call = "store.append_bytes('results.jsonl', b'{\"iteration\":2,\"pad\":\"' + b'x' * 64 + b'\"}\\n')"
    proc = subprocess.run([sys.executable, "-c", _LIMITED.format(root=str(tmp_path), call=call)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "cannot append to file://" in proc.stdout and "too large" in proc.stdout.lower()
    assert (tmp_path / "results.jsonl").read_bytes() == b'{"iteration":1}\n', "the partial line was not cut off"


@needs_dev_full
def test_results_wait_in_memory_while_the_disk_is_full_and_go_out_in_order(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    run = RunStorage(store)
    run.append_result({"iteration": 1, "timesteps": 10})
    results = tmp_path / RESULTS
    written = results.read_bytes()
    results.unlink()
    results.symlink_to("/dev/full")  # every write: ENOSPC (never read it: reads never end)

    for i in (2, 3):
        run.append_result({"iteration": i, "timesteps": 10 * i})  # training goes on: no exception
    assert isinstance(run.last_error, StorageError) and "No space left" in str(run.last_error)
    assert run.flush() is False
    # A checkpoint is not committed before its iteration's results are written.
    with pytest.raises(StorageError, match="not committed"):
        write_checkpoint(store, 3, {"model.pt": b"m"}, timesteps=30, before_manifest=run.flush)
    assert list_checkpoints(store) == []

    results.unlink()  # space is back
    results.write_bytes(written)
    run.append_result({"iteration": 4, "timesteps": 40})
    assert run.last_error is None
    assert [r["iteration"] for r in RunStorage(store).read_results()] == [1, 2, 3, 4]
    write_checkpoint(store, 4, {"model.pt": b"m"}, timesteps=40, before_manifest=run.flush)
    assert [c.iteration for c in list_checkpoints(store)] == [4]


def test_a_put_that_cannot_be_written_leaves_no_temp_file_and_names_the_key(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _LIMITED.format(root=str(tmp_path), call=(
        "store.put_bytes('checkpoints/000001/model.pt', b'x' * 100)"))], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "cannot write file://" in proc.stdout and "checkpoints/000001/model.pt" in proc.stdout
    assert not (tmp_path / "checkpoints" / "000001" / "model.pt").exists()
    assert not list(tmp_path.rglob(".kuberl-tmp-*")), "a temp file was left behind"
