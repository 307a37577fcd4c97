"""Where rollout workers go and where the replay-shard topology's actors say they ran (`distributed.placement`),
without Ray: the slots on the worker pods' nodes, the host from the pod's environment and the grouping by Ray
node that each results line carries."""

from __future__ import annotations

import socket

from kuberl.trainer.distributed.placement import (
    PLACEMENT_KEYS,
    placement_by_node,
    placement_fields,
    placement_of,
    rollout_slots,
    rollout_strategy,
)

HEAD = {"node": "a1" * 28, "nodeIp": "10.0.0.5", "host": "cartpole-apex-head"}
WORKER = {"node": "b2" * 28, "nodeIp": "10.0.1.7", "host": "cartpole-apex-worker-0"}


def test_the_host_is_the_pods_name_from_hostname_else_this_machines() -> None:
    assert placement_of("n1", "10.0.1.7", {"HOSTNAME": "exp-worker-0"}) == {
        "node": "n1", "nodeIp": "10.0.1.7", "host": "exp-worker-0"}
    assert placement_of("n1", "127.0.0.2", {})["host"] == socket.gethostname()
    assert placement_of("n1", "127.0.0.2", {"HOSTNAME": ""})["host"] == socket.gethostname()


def test_actors_are_grouped_by_the_ray_node_they_reported_in_order() -> None:
    actors = {
        "worker_10": {"envSteps": 64, **WORKER},
        "worker_2": {"envSteps": 64, **HEAD},
        "worker_1": {"envSteps": 64, **WORKER},
        "shard_1": {"size": 40, **HEAD},
        "shard_0": {"size": 41, **HEAD},
    }
    assert placement_by_node(actors) == {
        HEAD["node"]: {"host": "cartpole-apex-head", "nodeIp": "10.0.0.5", "actors": ["shard_0", "shard_1", "worker_2"]},
        WORKER["node"]: {"host": "cartpole-apex-worker-0", "nodeIp": "10.0.1.7", "actors": ["worker_1", "worker_10"]},
    }
    assert list(placement_by_node(actors)) == [HEAD["node"], WORKER["node"]]  # by host


def test_entries_without_a_placement_are_left_out() -> None:
    actors = {
        "worker_1": {"envSteps": 64, "node": None},  # a worker whose report had no placement
        "shard_0": {"size": 0, "adds": 0, "samples": 0, "replaced": True},  # replaced, not yet answered
        "shard_1": {"size": 12, **HEAD},
    }
    assert placement_by_node(actors) == {HEAD["node"]: {"host": HEAD["host"], "nodeIp": HEAD["nodeIp"],
                                                        "actors": ["shard_1"]}}
    assert placement_by_node({}) == {}



def _node(node_id: str, cpus: float, alive: bool = True) -> dict:
    return {"NodeID": node_id, "Alive": alive, "Resources": {"CPU": cpus, "memory": 1e9}}


def test_rollout_workers_fill_the_other_nodes_than_the_drivers_in_turn_one_slot_per_cpu_share() -> None:
    nodes = [_node("head", 8), _node("w1", 8), _node("w2", 4), _node("gone", 8, alive=False), _node("gpu-only", 0)]
    slots = rollout_slots(nodes, "head", cpus_per_worker=1.0)
    assert slots[:8] == ["w1", "w2"] * 4  # in turn while both have room
    assert slots[8:] == ["w1"] * 4 and len(slots) == 12  # the head, a dead node and a node without CPUs get none
    # Fractional CPUs per worker (fewer CPUs than workers in the cluster): more slots a node.
    assert rollout_slots(nodes, "head", cpus_per_worker=0.5).count("w2") == 8


def test_without_other_nodes_there_are_no_slots_and_every_worker_is_spread() -> None:
    assert rollout_slots([_node("head", 2)], "head", 1.0) == []
    assert rollout_strategy(1, []) == "SPREAD"


def test_a_worker_past_the_slots_is_spread_and_one_within_has_a_soft_affinity_that_may_spill() -> None:
    worker_node = WORKER["node"]  # Ray checks that a node id is hex
    slots = rollout_slots([_node(HEAD["node"], 1), _node(worker_node, 1)], HEAD["node"], 1.0)
    assert slots == [worker_node]
    first, second = rollout_strategy(1, slots), rollout_strategy(2, slots)
    assert (first.node_id, first.soft, first._spill_on_unavailable) == (worker_node, True, True)
    assert second == "SPREAD"  # the stand-in's two one-CPU pods: the second worker runs on the head's node


def test_the_first_shard_workers_share_one_look_at_the_cluster() -> None:
    from kuberl.trainer.distributed.shard_worker_pool import ShardWorkerPool

    calls: list[tuple[int, list[str] | None]] = []

    def start(position: int, slots: list[str] | None) -> str:
        calls.append((position, slots))
        return f"actor-{position}-{len(calls)}"

    slots = ["node-a", "node-b"]
    pool = ShardWorkerPool(start, 3, policy_factory=None, slots=slots)
    assert calls == [(0, slots), (1, slots), (2, slots)]
    assert pool.actors == ["actor-0-1", "actor-1-2", "actor-2-3"]


def test_a_placement_becomes_an_actors_statistics_fields_and_none_adds_none() -> None:
    placement = placement_of("n1", "10.0.1.7", {"HOSTNAME": "exp-worker-0"})
    fields = placement_fields(placement)
    assert fields == {"node": "n1", "nodeIp": "10.0.1.7", "host": "exp-worker-0"}
    assert set(fields) == PLACEMENT_KEYS
    assert placement_fields(None) == {}
