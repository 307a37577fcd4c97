"""Ape-X on a two-node local Ray cluster (nodes on their own loopback addresses): workers spread over both."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def two_node_cluster(monkeypatch):
    import ray
    from ray.cluster_utils import Cluster

    from kuberl.trainer.distributed.ray_runtime import init_ray

    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if ray.is_initialized():
        ray.shutdown()  # a test before this one may have left the shared local instance running
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"node_ip_address": "127.0.0.3", "num_cpus": 1, "include_dashboard": False},
    )
    try:
        cluster.add_node(node_ip_address="127.0.0.4", num_cpus=1)
        init_ray(cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_apex_trains_with_workers_spread_over_two_nodes(two_node_cluster) -> None:
    import ray

    from kuberl.trainer.algorithms.apex import ApexDQNConfig, shard_stats

    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    assert sorted(nodes.values()) == ["127.0.0.3", "127.0.0.4"]
    algo = (
        ApexDQNConfig().environment("CartPole-v1").rollouts(workers=2, envs_per_worker=4, fragment_length=32)
        .replay(shards=2, capacity=20_000).training(min_iteration_seconds=0.5, learning_starts=500).debugging(seed=2)
        .build()
    )
    try:
        result = algo.train()
        for _ in range(30):
            if result["learner"]["updates"] > 0 and len(result["workers"]) == 2:
                break
            result = algo.train()
        assert result["learner"]["updates"] > 0
        assert all(stats["size"] > 0 for stats in shard_stats(result).values())
        worker_nodes = {stats["node"] for stats in result["workers"].values()}
        assert worker_nodes == set(nodes)  # worker 1 on the non-driver node (its slot), worker 2 on the head
    finally:
        algo.stop()
