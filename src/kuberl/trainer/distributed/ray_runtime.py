"""Starting and joining Ray: one place decides addresses, so every run stays where it should."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

from kuberl.api.contract import MALLOC_ENV, ROLE_LABEL, WORKER_ROLE
from kuberl.trainer.machine import usable_cores

# Ray rewrites a node address of plain 127.0.0.1 to the machine's external address;
# any other loopback address is kept, so a local run binds to loopback only.
DEFAULT_LOCAL_NODE_IP = "127.0.0.2"


# Ray records an event for every task and actor call, kept in the GCS (up to 100k tasks) and
# buffered in each caller. kuberl's actors are called hundreds of times a second for days
# (samples, priorities, weights), which grew the GCS by ~400 MB and the learner by ~140 MB/h
# in a 30-minute soak; they do without. Ray's dashboard then lists fewer of their calls.
ACTOR_OPTIONS: dict[str, Any] = {"enable_task_events": False}

# glibc's malloc strands freed memory in two ways that long-lived actors hit. Once a block over
# its mmap threshold (128 KiB) is freed, it raises the threshold to that size (up to 32 MiB), so
# later blocks that size (sample batches, torch activations) come from the heap and leave holes
# there; and each thread that allocates gets an arena of its own (up to 8 per core; a Ray actor
# has ~30 threads) whose free memory only that arena reuses. The Ape-X learner's heap in use
# stayed flat while glibc's free lists grew from 5 to 31 MB in 8 minutes (~40 MB/h over a
# 30-minute soak; `bench/soak_apex.py --diagnose`). A fixed threshold and two arenas keep the
# free lists at ~2 MB. glibc reads these at process start, so they are in the environment of the
# node's processes, which Ray's workers inherit: a local node started here gets them from
# `init_ray`, a pod from the operator (`MALLOC_ENV` in the contract). A job's runtime_env could
# carry them too, but then no worker Ray prestarts fits the job and each actor waits for a new one.
# The price: each block of 128 KiB and up is mapped and zeroed afresh, 1.5-2x the CPU time of a CPU
# learner update at batch 256-512. A `malloc_trim(0)` every 30 s with two arenas instead kept the
# CPU time but not the memory (learner 73 / 19 MB/h over 8 minutes, against 36 / 8.7).
WORKER_ENV_VARS: dict[str, str] = dict(MALLOC_ENV)


@contextlib.contextmanager
def _node_environment(variables: dict[str, str]) -> Iterator[None]:
    """`variables` in os.environ while a local node starts (its processes inherit them), unless already set."""
    added = {name: value for name, value in variables.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def local_node_ip() -> str | None:
    """The address a local Ray node binds to: $KUBERL_NODE_IP, else a loopback address on Linux."""
    if os.environ.get("KUBERL_NODE_IP"):
        return os.environ["KUBERL_NODE_IP"]
    return DEFAULT_LOCAL_NODE_IP if sys.platform.startswith("linux") else None


def init_ray(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Connect to a Ray cluster at `address`, or start a private local one on loopback.

    Does nothing when Ray is already initialised in this process (tests share one instance).
    """
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": os.environ.get("KUBERL_RAY_LOG_TO_DRIVER", "0") == "1",
        "configure_logging": True,
        "logging_level": "WARNING",
    }
    if address:
        kwargs["address"] = address
    else:
        # "local" always starts a private instance: with no address Ray would join any cluster that a
        # `ray start` on this machine (another user's, a test's stand-in pod) has recorded in /tmp/ray.
        kwargs["address"] = "local"
        kwargs["num_cpus"] = num_cpus if num_cpus is not None else max(2, usable_cores())
        if num_gpus is not None:
            kwargs["num_gpus"] = num_gpus
        node_ip = local_node_ip()
        if node_ip:
            kwargs["_node_ip_address"] = node_ip
    with _node_environment(WORKER_ENV_VARS if not address else {}):
        ray.init(**kwargs)


def join_cluster(expected_nodes: int, wait_seconds: float, out: TextIO) -> None:
    """Join the cluster's Ray ($RAY_ADDRESS, else "auto") and wait until `expected_nodes` nodes are alive."""
    import ray

    init_ray(os.environ.get("RAY_ADDRESS") or "auto")
    deadline = time.monotonic() + wait_seconds
    while True:
        alive = sum(1 for node in ray.nodes() if node.get("Alive"))
        if alive >= expected_nodes:
            print(f"ray cluster ready: {alive}/{expected_nodes} nodes", file=out, flush=True)
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {alive} of {expected_nodes} Ray nodes joined within {wait_seconds:.0f}s; "
                f"check the worker pods (kubectl get pods -l {ROLE_LABEL}={WORKER_ROLE})"
            )
        time.sleep(1.0)
