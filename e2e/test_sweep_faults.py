"""End-to-end on the real control plane: a PBT RLSweep through faults. A population of two trains three rounds
of 2,048 env steps (CartPole PPO); in round 0 the operator is killed (SIGKILL: no shutdown, its peering record
left to expire) while the round's runs are under way (a head pod running, no run finished), and started again;
in round 1 kube-apiserver itself is restarted at the same point of the round (every watch and connection
breaks; etcd keeps the state).

The sweep must still end Succeeded, and the cluster's objects, its audit log and S3 must show:
- no duplicate trial: one RLExperiment per member and round (by name and by its member and round labels),
  each created once (audit log); and neither fault made any run's head pod again (one head, attempt 1);
- no lost round: every member's run of every round Succeeded and trained to the round's end (results in S3),
  and the sweep's record of each member has one value per round;
- no member restored from a checkpoint that was not its donor's best: each round's exploit steps (the sweep's
  PBTRound events, once per round) are the runs' restoreFrom: a laggard's is its donor's (the round's leader
  by the objective) last checkpoint, a leader's its own; that is the newest complete checkpoint of that run
  in S3 (every file matching its manifest), written at the round's end, and the run counts on from it.

Only the real control plane can restart its API server, so the scenario runs there (make e2e-control-plane).
"""

from __future__ import annotations

import collections
import os
import re
from typing import Any

import pytest
from experiments import Experiments, RunFiles, tiny_ppo, unique_name
from test_sweeps import GROUP, SWEEPS, VERSION, Sweeps

from kuberl.operator.builders.trial import ROUND_LABEL, TRIAL_LABEL
from kuberl.operator.names import head_name

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.environ.get("E2E_CLUSTER", "standin") != "control-plane",
                       reason="restarts kube-apiserver, which only the real control plane can "
                              "(E2E_CLUSTER=control-plane: make e2e-control-plane)"),
]

MEMBERS, ROUNDS, INTERVAL = 2, 3, 2048
METRIC = "episodeReturnMean"
EXPLOIT = re.compile(r"(\S+) <- (\S+)")


def pbt_sweep(name: str, cluster: Any) -> dict[str, Any]:
    template = tiny_ppo("template", cluster, rollouts={"workers": 0, "envsPerWorker": 4, "fragmentLength": 64},
                        workers={"replicas": 0}, stop={"timesteps": ROUNDS * INTERVAL})["spec"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLSweep", "metadata": {"name": name},
            "spec": {"template": template, "parallelism": MEMBERS,
                     "parameters": [{"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.01, "log": True}],
                     "search": {"algorithm": "pbt", "seed": 5, "pbt": {
                         "populationSize": MEMBERS, "perturbationInterval": INTERVAL, "resampleProbability": 0.0}}}}


def trial_name(sweep: str, member: int) -> str:
    return f"{sweep}-t{member:03d}"


def run_name(sweep: str, member: int, round_number: int) -> str:
    return f"{trial_name(sweep, member)}-r{round_number:02d}"


def _round_in_progress(sweeps: Sweeps, experiments: Experiments, name: str, round_number: int) -> dict[str, str]:
    """The phases of the round's runs once the sweep is in that round, one run's head trains and not every run
    of the round has succeeded (empty until then)."""
    if (sweeps.status(name).get("pbtRound") or 0) != round_number:
        return {}
    runs = [run_name(name, m, round_number) for m in range(MEMBERS)]
    phases = {run: experiments.status(run).get("phase") or "" for run in runs}
    training = any(experiments.running_pod(run, "head") for run in runs)
    return phases if training and any(p != "Succeeded" for p in phases.values()) else {}


def test_pbt_sweep_survives_an_operator_kill_and_an_apiserver_restart(cluster, api, experiments):
    name = unique_name("pbtf")
    sweeps = Sweeps(api, cluster.namespace)
    sweeps.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, SWEEPS, pbt_sweep(name, cluster))

    at_kill = experiments.wait(name, lambda: _round_in_progress(sweeps, experiments, name, 0), "round 0 training",
                               timeout=300)
    cluster.kill_and_restart_operator()
    at_restart = experiments.wait(name, lambda: _round_in_progress(sweeps, experiments, name, 1),
                                  "round 1 training", timeout=400)
    cluster.restart_apiserver()
    final = experiments.wait(name, lambda: (s := sweeps.status(name)).get("phase") in ("Succeeded", "Failed") and s,
                             "the sweep to end", timeout=600, interval=1.0)
    (began, ready), = cluster.apiserver_restarts[-1:]
    print(f"\nround 0 at the operator's kill: {at_kill}; round 1 at the apiserver's restart: {at_restart} "
          f"(down and authorizing again after {ready - began:.1f} s)")
    assert final["phase"] == "Succeeded", experiments.explain(name)

    # -- no duplicate trial, no lost round --
    runs = sweeps.trials(name)
    expected = {run_name(name, m, r): (m, r) for m in range(MEMBERS) for r in range(ROUNDS)}
    assert sorted(runs) == sorted(expected)
    labels = [run["metadata"]["labels"] for run in runs.values()]
    labelled = collections.Counter((int(label[TRIAL_LABEL]), int(label[ROUND_LABEL])) for label in labels)
    assert labelled == collections.Counter(expected.values())
    created = collections.Counter(e["objectRef"]["name"] for e in cluster.audit(
        user=cluster.operator_user, verb="create", resource="rlexperiments", namespace=cluster.namespace, code="201"))
    heads = collections.Counter(e["objectRef"]["name"] for e in cluster.audit(
        user=cluster.operator_user, verb="create", resource="pods", namespace=cluster.namespace, code="201"))
    for run, (_, round_number) in expected.items():
        status = runs[run]["status"]
        assert created[run] == 1, (run, created[run])
        assert status["phase"] == "Succeeded", (run, status)
        # Neither fault stops a trainer: no head of any run is made again (a crashed one would be, on attempt 2).
        assert heads[head_name(run)] == 1 and status["attempt"] == 1, (run, heads[head_name(run)], status)
        assert status["timesteps"] >= (round_number + 1) * INTERVAL, (run, status)
        assert RunFiles(cluster, run).results()[-1]["timesteps"] == status["timesteps"], run
    for record in final["trials"]:
        assert record["state"] == "Succeeded", record
        assert [step for step, _ in record["intermediate"]] == [float((r + 1) * INTERVAL) for r in range(ROUNDS)]
        assert [value for _, value in record["intermediate"]] == [
            pytest.approx(runs[run_name(name, record["number"], r)]["status"][METRIC]) for r in range(ROUNDS)]
        assert [runs[run_name(name, record["number"], r)]["spec"]["config"]["seed"] for r in range(ROUNDS)] == \
            record["seeds"]

    # -- every round's restoreFrom: the donor's best, and the donor the round's leader --
    announced = collections.defaultdict(list)
    for event in experiments.events(name):
        if event.reason == "PBTRound" and (found := re.match(r"round (\d+) from", event.message or "")):
            announced[int(found.group(1))] += [EXPLOIT.findall(event.message)] * (event.count or 1)
    for round_number in range(1, ROUNDS):
        before = {m: runs[run_name(name, m, round_number - 1)] for m in range(MEMBERS)}
        latest = {m: _latest_checkpoint(cluster, run_name(name, m, round_number - 1)) for m in range(MEMBERS)}
        donors = {}
        for member in range(MEMBERS):
            restore = runs[run_name(name, member, round_number)]["spec"]["checkpoint"]["restoreFrom"]
            sources = [m for m in range(MEMBERS) if before[m]["status"]["lastCheckpoint"] == restore]
            assert len(sources) == 1, (round_number, member, restore)
            donor = sources[0]
            uri, manifest = latest[donor]
            assert restore.rstrip("/") == uri, (round_number, member, restore, uri)  # its newest complete one
            assert manifest["timesteps"] == before[donor]["status"]["timesteps"], manifest
            first = RunFiles(cluster, run_name(name, member, round_number)).results()[0]
            assert first["timesteps"] > manifest["timesteps"], first  # it counted on from the checkpoint
            donors[member] = donor
        exploits = {m: d for m, d in donors.items() if m != d}
        assert len(exploits) == 1, donors  # a population of two: the laggard takes the leader's
        ((laggard, leader),) = exploits.items()
        assert before[leader]["status"][METRIC] >= before[laggard]["status"][METRIC], (round_number, before)
        lr = runs[run_name(name, laggard, round_number)]["spec"]["config"]["lr"]
        assert lr / before[leader]["spec"]["config"]["lr"] in (pytest.approx(0.8), pytest.approx(1.2)) or \
            lr in (0.0001, 0.01), lr
        assert announced[round_number] == [[(trial_name(name, laggard), trial_name(name, leader))]], \
            announced  # the step was taken once, and its record is what the runs did


def _latest_checkpoint(cluster: Any, run: str) -> tuple[str, dict[str, Any]]:
    """The run's newest complete checkpoint in S3 (every file matching its manifest): its URI and manifest."""
    files = RunFiles(cluster, run)
    manifests = files.checkpoints()
    assert manifests, f"{run} has no complete checkpoint in S3"
    files.verify(manifests[-1])
    return files.uri + manifests[-1]["key"], manifests[-1]
