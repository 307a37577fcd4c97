"""End-to-end: an Ape-X DQN experiment (apex-dqn: two rollout worker actors, two replay shards) through the operator
to Succeeded, and where its actors ran, read from results.jsonl and matched to the pods of the Kubernetes API.

The placement is the one docs/architecture.md ("Where the actors run") states: each rollout worker asks Ray for
one CPU (two workers, two CPUs in the Ray cluster) and goes to the worker pods' nodes first, so with a head pod
and a worker pod of one CPU each, worker 1 takes the worker pod's slot and worker 2, past the slots, the head's
last CPU; the replay shards ask for no CPU, only their memory, and stay on the node of the driver that creates
them, the head pod's. A Ray node is a pod: its address is the
pod's IP and its actors' host name the pod's name.
"""

from __future__ import annotations

from typing import Any

import pytest
from experiments import Experiments, RunFiles, tiny_ppo, unique_name

pytestmark = pytest.mark.timeout(600)

SHARDS = 2
CAPACITY = 20_000
TIMESTEPS = 12_000  # long enough for the worker pod's actor (a cold start there) to report on the real control plane
PLACEMENT_KEYS = ("node", "nodeIp", "host")


def _pods(experiments: Experiments, name: str) -> dict[str, tuple[str, str]] | None:
    """role -> (pod name, pod IP) of the running head and worker pods, once both have an IP."""
    found = {role: experiments.running_pod(name, role) for role in ("head", "worker")}
    if any(pod is None or not pod.status.pod_ip for pod in found.values()):
        return None
    return {role: (pod.metadata.name, pod.status.pod_ip) for role, pod in found.items()}


def _placements(results: list[dict[str, Any]], kind: str) -> dict[str, set[tuple[str, str, str]]]:
    """Every (node, nodeIp, host) each actor of `kind` ("worker", "shard") reported, over all results lines."""
    seen: dict[str, set[tuple[str, str, str]]] = {}
    for result in results:
        entries = result.get("workers", {}) if kind == "worker" else result.get("replay", {})
        for actor, entry in entries.items():
            if actor.startswith(f"{kind}_") and entry.get("host"):
                seen.setdefault(actor, set()).add(tuple(entry[key] for key in PLACEMENT_KEYS))
    return seen


def test_apex_workers_go_to_the_worker_pod_first_and_shards_stay_on_the_head(cluster, experiments):
    name = unique_name("apex")
    experiments.apply(tiny_ppo(
        name, cluster, algorithm="apex-dqn", config={"learningStarts": 500, "seed": 1},
        rollouts={"workers": 2, "envsPerWorker": 4, "fragmentLength": 64},
        replay={"shards": SHARDS, "capacity": CAPACITY}, stop={"timesteps": TIMESTEPS},
        checkpoint={"everyIterations": 5}))
    # The worker pod is deleted after success: its name and IP are read while it runs.
    pods = experiments.wait(name, lambda: _pods(experiments, name), "the head and worker pods to run", timeout=300)
    status = experiments.wait_phase(name, "Succeeded", "Failed", timeout=420)
    assert status["phase"] == "Succeeded", experiments.explain(name)
    assert status["timesteps"] >= TIMESTEPS and status["attempt"] == 1, experiments.explain(name)

    results = RunFiles(cluster, name).results()
    assert results, experiments.explain(name)
    last = results[-1]
    assert last["sampler"]["workerRestarts"] == 0 and last["sampler"]["shardRestarts"] == 0, (
        last["sampler"], experiments.explain(name))
    assert last["learner"]["updates"] > 0, last["learner"]

    # The shards, with their figures: each holds its half of the capacity, was added to and sampled from.
    shards = {key: stats for key, stats in last["replay"].items() if key.startswith("shard_")}
    assert sorted(shards) == [f"shard_{i}" for i in range(SHARDS)], last["replay"]
    for shard, stats in shards.items():
        assert stats["capacity"] == CAPACITY // SHARDS, (shard, stats)
        assert 0 < stats["size"] <= stats["capacity"] and stats["adds"] >= stats["size"], (shard, stats)
        assert stats["samples"] > 0 and stats["bytes"] > 0, (shard, stats)

    # Where each actor ran: one place per actor for the whole run, a pod's Ray node.
    head, worker = pods["head"], pods["worker"]
    workers, replay = _placements(results, "worker"), _placements(results, "shard")
    assert sorted(workers) == ["worker_1", "worker_2"], workers
    assert sorted(replay) == sorted(shards), replay
    assert all(len(places) == 1 for places in [*workers.values(), *replay.values()]), (workers, replay)
    worker_place = {actor: next(iter(places)) for actor, places in workers.items()}
    shard_place = {actor: next(iter(places)) for actor, places in replay.items()}
    # One rollout worker on each pod's Ray node: the first on the worker pod's (its slot), the second on the head's.
    assert sorted((host, ip) for _, ip, host in worker_place.values()) == sorted([head, worker]), worker_place
    assert worker_place["worker_1"][1:] == (worker[1], worker[0]), (worker_place, pods)
    on_head = [actor for actor, (_, ip, host) in worker_place.items() if (host, ip) == head]
    head_node = worker_place[on_head[0]][0]
    worker_node = next(node for node, ip, host in worker_place.values() if (host, ip) == worker)
    assert head_node != worker_node
    # Every shard on the head pod's Ray node (the driver's).
    assert all(place == (head_node, head[1], head[0]) for place in shard_place.values()), (shard_place, head)

    # Each results line's summary by node says the same (a line lists the workers that reported in its iteration).
    expected = {head_node: (head, {*shards, *on_head}), worker_node: (worker, set(worker_place) - set(on_head))}
    listed: dict[str, set[str]] = {node: set() for node in expected}
    for result in results:
        for node, entry in result["placement"].items():
            assert node in expected and (entry["host"], entry["nodeIp"]) == expected[node][0], (node, entry, pods)
            assert entry["actors"] == sorted(entry["actors"], key=lambda a: (a.split("_")[0], int(a.split("_")[1])))
            listed[node] |= set(entry["actors"])
    assert listed == {node: actors for node, (_, actors) in expected.items()}, listed
