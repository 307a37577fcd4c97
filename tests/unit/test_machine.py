"""The CPUs the trainer sizes itself by (`kuberl.trainer.machine`): the container's CPU limit read from cgroup v2
or v1, bounding the CPUs this process may run on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kuberl.trainer.machine import cgroup_cpu_limit, usable_cores


@pytest.mark.parametrize(("cpu_max", "limit"), [
    ("200000 100000\n", 2.0),  # resources.limits.cpu: 2
    ("250000 100000", 2.5),  # 2500m
    ("50000 100000", 0.5),  # 500m
    ("max 100000\n", None),  # no limit
    ("garbage", None),
])
def test_a_cgroup_v2_cpu_max_gives_the_limit_in_cpus(cpu_max: str, limit: float | None) -> None:
    assert cgroup_cpu_limit(cpu_max) == limit


def test_cgroup_v1_quota_and_period_give_the_limit_and_minus_one_none() -> None:
    assert cgroup_cpu_limit(None, "150000\n", "100000\n") == 1.5
    assert cgroup_cpu_limit(None, "-1", "100000") is None
    assert cgroup_cpu_limit(None, None, None) is None


def _cgroup(tmp_path: Path, cpu_max: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    if cpu_max is not None:
        (tmp_path / "cpu.max").write_text(cpu_max)
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0])
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1])
    return tmp_path


def test_usable_cores_are_the_affinity_bounded_by_the_limit_rounded_up(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "none").mkdir()
    assert usable_cores(_cgroup(tmp_path / "none")) == affinity  # no cgroup files: the affinity
    assert usable_cores(_cgroup(tmp_path, cpu_max="max 100000")) == affinity
    (tmp_path / "half").mkdir()
    assert usable_cores(_cgroup(tmp_path / "half", cpu_max="50000 100000")) == 1  # 500m: one core, never 0
    (tmp_path / "v1").mkdir()
    assert usable_cores(_cgroup(tmp_path / "v1", v1=("100000", "100000"))) == 1
    (tmp_path / "big").mkdir()
    assert usable_cores(_cgroup(tmp_path / "big", cpu_max=f"{(affinity + 8) * 100000} 100000")) == affinity


def test_a_limit_of_one_and_a_half_cpus_gives_two_where_the_process_may_run_on_two(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("this process may run on one CPU only")
    assert usable_cores(_cgroup(tmp_path, cpu_max="150000 100000")) == 2
