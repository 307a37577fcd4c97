"""The stand-in kubelet's view of a pod's processes: which have exited, read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys

from kuberl_testing.process_tree import still_running


def _fake_proc(tmp_path, pid: int, state: str) -> str:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "status").write_text(f"Name:\tpython\nUmask:\t0022\nState:\t{state}\nPid:\t{pid}\n")
    return str(tmp_path)


def test_a_zombie_or_a_dying_process_has_exited_and_a_sleeping_one_has_not(tmp_path):
    root = _fake_proc(tmp_path, 11, "Z (zombie)")
    _fake_proc(tmp_path, 12, "X (dead)")
    _fake_proc(tmp_path, 13, "S (sleeping)")
    _fake_proc(tmp_path, 14, "R (running)")
    assert [still_running(pid, root) for pid in (11, 12, 13, 14, 15)] == [False, False, True, True, False]


def test_a_real_process_runs_until_killed_and_reaped():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert still_running(child.pid)
        child.kill()
        child.wait(10)
        assert not still_running(child.pid)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert still_running(os.getpid())
