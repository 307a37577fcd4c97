"""Where rollout workers go, and where the replay-shard topology's actors say they ran.

Rollout worker actors go to the Ray nodes other than the driver's first (`rollout_slots`): in a cluster those
are the worker pods, and the head pod keeps its cores for the driver, the learner and the replay shards. Each
rollout worker and replay shard finds out once which Ray node it is on, and each results line says it per
actor and grouped by node (in a cluster, a node is a pod).

A Ray node of kuberl's is one pod: the operator starts it with `--node-ip-address=$POD_IP`, and Ray's processes
inherit the pod's environment, where Kubernetes sets `HOSTNAME` to the pod's name. So `nodeIp` is the pod's IP
and `host` its name (a local run: this machine's loopback address and host name).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict


class Placement(TypedDict):
    node: str  # the Ray node id
    nodeIp: str  # the node's address: the pod's IP in a cluster
    host: str  # the pod's name in a cluster ($HOSTNAME), else this machine's host name


PLACEMENT_KEYS = frozenset(Placement.__annotations__)


def placement_of(node: str, node_ip: str, environ: Mapping[str, str]) -> Placement:
    """A process's placement from its Ray node's id and address and its environment."""
    return {"node": node, "nodeIp": node_ip, "host": environ.get("HOSTNAME") or socket.gethostname()}


def current_placement() -> Placement | None:
    """The calling process's placement (a Ray actor's: its node's); None where Ray is not initialised (a
    ReplayShard used as a plain object), without importing Ray for that."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return placement_of(ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), os.environ)


def placement_fields(placement: Placement | None) -> dict[str, str]:
    """A placement as fields of an actor's statistics (none for None). Spelt out: to a type checker a TypedDict
    is a Mapping[str, object], whatever its values."""
    if placement is None:
        return {}
    return {"node": placement["node"], "nodeIp": placement["nodeIp"], "host": placement["host"]}


def placement_by_node(actors: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Actors (name -> its results entry: "worker_1", "shard_0", ...) grouped by the Ray node they reported:
    node id -> {"host", "nodeIp", "actors": their names, in order}. An entry without a placement (a shard
    replaced this iteration, which has not answered yet) is left out."""
    nodes: dict[str, dict[str, Any]] = {}
    for name, entry in actors.items():
        if not all(isinstance(entry.get(key), str) for key in PLACEMENT_KEYS):
            continue
        node = nodes.setdefault(entry["node"], {"host": entry["host"], "nodeIp": entry["nodeIp"], "actors": []})
        node["actors"].append(name)
    for node in nodes.values():
        node["actors"].sort(key=_actor_order)
    return dict(sorted(nodes.items(), key=lambda item: (item[1]["host"], item[1]["nodeIp"], item[0])))


def _actor_order(name: str) -> tuple[str, int]:
    """By kind, then by index: worker_2 before worker_10."""
    kind, _, index = name.rpartition("_")
    return (kind, int(index)) if index.isdigit() else (name, -1)


def rollout_slots(nodes: Iterable[Mapping[str, Any]], driver_node: str, cpus_per_worker: float) -> list[str]:
    """The nodes rollout actors go to first, one slot per `cpus_per_worker` of each node's CPUs, taken in turn
    across the nodes: every alive Ray node (`ray.nodes()`) but the driver's. Empty where there is no other node
    (a local run, or no worker pods)."""
    capacity: list[tuple[str, int]] = []
    for node in nodes:
        if not node.get("Alive") or node.get("NodeID") == driver_node:
            continue
        count = int(float(node.get("Resources", {}).get("CPU", 0.0)) / cpus_per_worker + 1e-9)
        if count > 0:
            capacity.append((str(node["NodeID"]), count))
    capacity.sort()
    slots: list[str] = []
    for turn in range(max((count for _, count in capacity), default=0)):
        slots.extend(node for node, count in capacity if count > turn)
    return slots


def rollout_strategy(worker_index: int, slots: Sequence[str]) -> Any:
    """Ray's scheduling strategy for rollout worker `worker_index` (from 1): a soft affinity to its slot's node,
    spilling to another node if that one is busy or gone; past the slots, spread over every node."""
    if not 1 <= worker_index <= len(slots):
        return "SPREAD"
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # _spill_on_unavailable: without it a soft affinity waits for the node's CPUs however long they stay taken
    # (an evaluation actor there, or a dead actor not yet released), where another node could run the worker.
    return NodeAffinitySchedulingStrategy(slots[worker_index - 1], soft=True, _spill_on_unavailable=True)


def cluster_rollout_slots(cpus_per_worker: float) -> list[str]:
    """`rollout_slots` of the Ray cluster this process is connected to, the calling process being the driver."""
    import ray

    return rollout_slots(ray.nodes(), ray.get_runtime_context().get_node_id(), cpus_per_worker)


def rollout_actor_strategy(worker_index: int, cpus_per_worker: float, slots: Sequence[str] | None) -> Any:
    """`rollout_strategy` with the cluster's slots looked up where `slots` is None (a replacement: nodes may have
    come or gone since the first workers shared one look)."""
    return rollout_strategy(worker_index, cluster_rollout_slots(cpus_per_worker) if slots is None else slots)
