"""What this process may use of the machine: its CPUs, bounded by the container's CPU limit.

In a pod os.cpu_count() is the node's CPUs, not the pod's `resources.limits.cpu`: a head pod limited to 2 CPUs on
a 64-core node would otherwise step 64 envs on 64 threads in 2 CPUs' time (and Kubernetes throttles the rest).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_cpu_limit(cpu_max: str | None = None, cfs_quota_us: str | None = None,
                     cfs_period_us: str | None = None) -> float | None:
    """The container's CPU limit in CPUs, from cgroup v2's `cpu.max` ("200000 100000"; "max 100000": none) or
    cgroup v1's `cpu.cfs_quota_us` and `cpu.cfs_period_us` (quota -1: none); None where there is none."""
    try:
        if cpu_max is not None:
            quota, _, period = cpu_max.strip().partition(" ")
            return None if quota == "max" else int(quota) / int(period or 100_000)
        if cfs_quota_us is not None and cfs_period_us is not None and int(cfs_quota_us) > 0:
            return int(cfs_quota_us) / int(cfs_period_us)
    except ValueError:  # a format this does not know: no limit read
        return None
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def usable_cores(cgroup_root: str | os.PathLike[str] = CGROUP_ROOT) -> int:
    """The CPUs this process may run on (its affinity), at most the container's CPU limit rounded up."""
    root = Path(cgroup_root)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(_read(root / "cpu.max"), _read(root / "cpu" / "cpu.cfs_quota_us"),
                             _read(root / "cpu" / "cpu.cfs_period_us"))
    if limit is not None:
        cores = min(cores, math.ceil(limit - 1e-9))
    return max(1, cores)
