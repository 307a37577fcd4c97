"""End-to-end: an RLSweep on a cluster (the stand-in or the real control plane): the operator creates
the trials as RLExperiments that really train, prunes a lagging one by suspending it, survives a
restart mid-sweep without a duplicate trial, and keeps the best in the sweep's status; and a PBT
population whose laggard really continues from the leader's checkpoint, through storage.

The pruned trial is made to lag for sure: the sweep's one parameter is CartPole's max_episode_steps
(env.config), and a 5-step cap holds every episode's return at 5 at most.
"""

from __future__ import annotations

from typing import Any

import pytest
from experiments import Experiments, RunFiles, tiny_ppo, unique_name
from kubernetes import client as k8s

GROUP, VERSION, SWEEPS, EXPERIMENTS = "kuberl.io", "v1alpha1", "rlsweeps", "rlexperiments"

pytestmark = pytest.mark.timeout(900)


def sweep_manifest(name: str, cluster: Any) -> dict[str, Any]:
    # A budget the lagging trial cannot finish before the operator has seen it lag: its 5-step episodes run
    # at about 4,500 steps a second, so it lives about 20 s, and the test clusters' operators read a trial's
    # status every 1 s (the stand-in, the control plane) or 2 s (kind). It was pruned at about 22k steps.
    template = tiny_ppo("template", cluster, rollouts={"workers": 0, "envsPerWorker": 4, "fragmentLength": 64},
                        workers={"replicas": 0}, stop={"timesteps": 98_304})["spec"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLSweep",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {"template": template,
                     "parameters": [{"path": "env.config.max_episode_steps", "type": "categorical",
                                     "values": [200, 5]}],
                     "search": {"algorithm": "grid"},
                     "earlyStopping": {"algorithm": "median", "interval": 512, "startupTrials": 1},
                     "maxTrials": 2, "parallelism": 1}}


class Sweeps:
    def __init__(self, api: k8s.ApiClient, namespace: str):
        self.custom, self.namespace = k8s.CustomObjectsApi(api), namespace

    def status(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, SWEEPS, name).get(
            "status") or {}

    def trials(self, sweep: str) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, EXPERIMENTS,
                                                          label_selector=f"kuberl.io/sweep={sweep}")["items"]
        return {i["metadata"]["name"]: i for i in items}


def test_a_sweep_trains_its_trials_prunes_the_lagging_one_and_survives_a_restart(cluster, api, experiments):
    name = unique_name("sw")
    sweeps = Sweeps(api, cluster.namespace)
    body = sweeps.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, SWEEPS,
                                                         sweep_manifest(name, cluster))
    first, second = f"{name}-t000", f"{name}-t001"
    experiments.wait(first, lambda: experiments.running_pod(first, "head"), "the first trial's head pod")
    assert list(sweeps.trials(name)) == [first]  # parallelism 1
    uid = sweeps.trials(name)[first]["metadata"]["uid"]
    cluster.restart_operator()
    status = experiments.wait_phase(first, "Succeeded", "Failed", timeout=600)
    assert status["phase"] == "Succeeded", experiments.explain(first)
    assert sweeps.trials(name)[first]["metadata"]["uid"] == uid  # the restart made nothing twice
    ref = sweeps.trials(name)[first]["metadata"]["ownerReferences"][0]
    assert ref["kind"] == "RLSweep" and ref["uid"] == body["metadata"]["uid"]

    pruned = _wait(lambda: (s := sweeps.status(name)).get("trialsPruned") == 1 and s, 600,
                   f"{second} pruned", experiments, second)
    record = pruned["trials"][1]
    assert record["state"] == "Pruned" and record["value"] <= 5.0, record
    assert record["params"] == {"env.config.max_episode_steps": 5}
    experiments.wait(second, lambda: experiments.status(second).get("phase") == "Suspended", "suspended")
    experiments.wait(second, lambda: not experiments.pods(second), "the pruned trial's pods deleted")
    final = _wait(lambda: (s := sweeps.status(name)).get("phase") in ("Succeeded", "Failed") and s, 120,
                  "the sweep to end", experiments, name)
    assert final["phase"] == "Succeeded" and final["best"]["name"] == first
    assert final["best"]["value"] == pytest.approx(status["episodeReturnMean"])
    assert sorted(sweeps.trials(name)) == [first, second]

    sweeps.custom.delete_namespaced_custom_object(GROUP, VERSION, cluster.namespace, SWEEPS, name)
    _wait(lambda: not sweeps.trials(name), 120, "the trials deleted with the sweep", experiments, name)


def _wait(check, timeout: float, what: str, experiments: Experiments, name: str) -> Any:
    return experiments.wait(name, check, what, timeout, interval=1.0)


def test_pbt_a_laggard_continues_from_the_leaders_checkpoint(cluster, api, experiments):
    """Population 2, two rounds of 1,024 steps: the laggard's round-1 run restores the leader's last
    checkpoint (its first result counts on from there) with the leader's lr x0.8 or x1.2."""
    name = unique_name("pbt")
    sweeps = Sweeps(api, cluster.namespace)
    template = tiny_ppo("template", cluster, rollouts={"workers": 0, "envsPerWorker": 4, "fragmentLength": 64},
                        workers={"replicas": 0}, stop={"timesteps": 2048})["spec"]
    sweeps.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, SWEEPS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "RLSweep", "metadata": {"name": name},
        "spec": {"template": template, "parallelism": 2,
                 "parameters": [{"path": "config.lr", "type": "float", "low": 0.00001, "high": 0.01, "log": True}],
                 "search": {"algorithm": "pbt", "seed": 3, "pbt": {
                     "populationSize": 2, "perturbationInterval": 1024, "resampleProbability": 0.0}}}})
    final = _wait(lambda: (s := sweeps.status(name)).get("phase") in ("Succeeded", "Failed") and s, 840,
                  "the population to finish", experiments, name)
    assert final["phase"] == "Succeeded", final
    runs = sweeps.trials(name)
    assert sorted(runs) == [f"{name}-t00{m}-r0{r}" for m in (0, 1) for r in (0, 1)]
    first_round = {m: runs[f"{name}-t00{m}-r00"] for m in (0, 1)}
    copied = [m for m in (0, 1) if runs[f"{name}-t00{m}-r01"]["spec"]["checkpoint"]["restoreFrom"]
              == first_round[1 - m]["status"]["lastCheckpoint"]]
    assert len(copied) == 1, {n: r["spec"]["checkpoint"] for n, r in runs.items()}
    laggard, leader = copied[0], 1 - copied[0]
    assert runs[f"{name}-t00{leader}-r01"]["spec"]["checkpoint"]["restoreFrom"] == \
        first_round[leader]["status"]["lastCheckpoint"]
    leader_lr = first_round[leader]["spec"]["config"]["lr"]
    assert runs[f"{name}-t00{laggard}-r01"]["spec"]["config"]["lr"] / leader_lr in (
        pytest.approx(0.8), pytest.approx(1.2)) or runs[f"{name}-t00{laggard}-r01"]["spec"]["config"]["lr"] in (
        0.00001, 0.01)
    first_result = RunFiles(cluster, f"{name}-t00{laggard}-r01").results()[0]
    assert first_result["timesteps"] > first_round[leader]["status"]["timesteps"], first_result  # counts on
    assert [len(t["intermediate"]) for t in final["trials"]] == [2, 2]
    assert final["best"]["value"] == max(t["value"] for t in final["trials"])
