"""The real Kopf operator reconciling RLSweeps against the API emulator: trials as owned RLExperiments,
the parallelism limit, pruning by suspend, restarts without duplicates, suspend and delete cascades,
maxFailedTrials. As in test_operator_lifecycle.py no trainer runs: the tests write the trials' head
pods as a kubelet would and serve the trainer's /status from loopback."""

from __future__ import annotations

from typing import Any

import pytest

from kuberl.api.sweep_types import PLURAL as SWEEPS
from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl_testing.operator_fixtures import operator_fixtures
from kuberl_testing.operator_harness import OperatorHarness, TrainerStatusServer, wait_for

pytestmark = pytest.mark.timeout(300)

STATUS_PORT, harness, ns = operator_fixtures("sweep", 10)
TEMPLATE = {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 1000},
            "storage": {"uri": "s3://bucket/runs"}}
PARAMETERS = [{"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.003, "log": True},
              {"path": "config.entropyCoeff", "type": "categorical", "values": [0.0, 0.01]}]


def sweep_body(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLSweep", "metadata": {"name": name},
            "spec": {"template": TEMPLATE, "parameters": PARAMETERS,
                     "search": {"algorithm": "random", "seed": 3}, **spec}}


def apply(h: OperatorHarness, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return h.custom.create_namespaced_custom_object(GROUP, VERSION, ns, SWEEPS, body)


def sweep_status(h: OperatorHarness, ns: str, name: str) -> dict[str, Any]:
    return h.custom.get_namespaced_custom_object(GROUP, VERSION, ns, SWEEPS, name).get("status") or {}


def trials(h: OperatorHarness, ns: str) -> dict[str, dict[str, Any]]:
    return {t["metadata"]["name"]: t for t in h.objects(ns, PLURAL, GROUP)}


def finish(h: OperatorHarness, ns: str, trial: str, value: float | None, ok: bool = True,
           timesteps: int = 1000) -> None:
    """The trial's head pod ends as the trainer would leave it."""
    wait_for(lambda: f"{trial}-head" in h.pods(ns), what=f"{trial}'s head pod")
    if ok:
        summary = {"result": "Succeeded", "reason": "StopCriterion", "message": "stop.timesteps reached",
                   "iteration": 5, "timesteps": timesteps, "episodeReturnMean": value,
                   "lastCheckpoint": f"s3://bucket/runs/{ns}/{trial}/checkpoints/5"}
        h.set_pod_status(ns, f"{trial}-head", "Succeeded", exit_code=0, message=summary)
    else:
        h.set_pod_status(ns, f"{trial}-head", "Failed", exit_code=2,
                         message={"result": "InvalidSpec", "reason": "InvalidSpec", "message": "env broke"})


def test_trials_are_owned_experiments_within_parallelism_and_the_best_is_kept(harness, ns):
    sweep = apply(harness, ns, sweep_body("sw", maxTrials=3, parallelism=2))
    wait_for(lambda: len(trials(harness, ns)) == 2, what="two trials")
    children = trials(harness, ns)
    assert sorted(children) == ["sw-t000", "sw-t001"]
    status = wait_for(lambda: sweep_status(harness, ns, "sw").get("trialsRunning") == 2 and
                      sweep_status(harness, ns, "sw"))
    for record in status["trials"]:
        child = children[record["name"]]
        ref = child["metadata"]["ownerReferences"][0]
        assert ref["kind"] == "RLSweep" and ref["uid"] == sweep["metadata"]["uid"] and ref["controller"]
        assert child["spec"]["config"]["lr"] == record["params"]["config.lr"]
        assert child["spec"]["config"]["entropyCoeff"] == record["params"]["config.entropyCoeff"]
        assert child["metadata"]["labels"]["kuberl.io/sweep"] == "sw"
    assert status["phase"] == "Running"

    finish(harness, ns, "sw-t000", 40.0)
    wait_for(lambda: "sw-t002" in trials(harness, ns), what="the third trial once one finished")
    assert len(trials(harness, ns)) == 3  # never more than maxTrials
    finish(harness, ns, "sw-t001", 90.0)
    finish(harness, ns, "sw-t002", 70.0)
    status = wait_for(lambda: sweep_status(harness, ns, "sw").get("phase") == "Succeeded" and
                      sweep_status(harness, ns, "sw"), what="the sweep to succeed")
    assert status["best"]["name"] == "sw-t001" and status["best"]["value"] == 90.0
    assert (status["trialsSucceeded"], status["trialsRunning"], status["trialsFailed"]) == (3, 0, 0)
    succeeded = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert succeeded["status"] == "True" and succeeded["reason"] == "TrialsDone"


def test_a_lagging_trial_is_pruned_by_suspending_it(harness, ns):
    leader = TrainerStatusServer({"phase": "Running", "attempt": 1, "iteration": 2, "timesteps": 200,
                                  "episodeReturnMean": 50.0}, STATUS_PORT)
    lagger = TrainerStatusServer({"phase": "Running", "attempt": 1, "iteration": 1, "timesteps": 100,
                                  "episodeReturnMean": 9.0}, STATUS_PORT)
    try:
        apply(harness, ns, sweep_body("pr", maxTrials=2, parallelism=2, earlyStopping={
            "algorithm": "median", "interval": 100, "startupTrials": 1}))
        wait_for(lambda: {"pr-t000-head", "pr-t001-head"} <= set(harness.pods(ns)), what="two head pods")
        harness.set_pod_status(ns, "pr-t000-head", "Running", ip=leader.ip)
        wait_for(lambda: sweep_status(harness, ns, "pr")["trials"][0]["intermediate"] == [[200.0, 50.0]],
                 what="the leader's intermediate value")
        finish(harness, ns, "pr-t000", 55.0)
        wait_for(lambda: sweep_status(harness, ns, "pr").get("trialsSucceeded") == 1)
        harness.set_pod_status(ns, "pr-t001-head", "Running", ip=lagger.ip)
        wait_for(lambda: sweep_status(harness, ns, "pr")["trials"][1]["intermediate"] == [[100.0, 9.0]])
        lagger.body = {**lagger.body, "iteration": 2, "timesteps": 230, "episodeReturnMean": 12.0}
        status = wait_for(lambda: sweep_status(harness, ns, "pr").get("trialsPruned") == 1 and
                          sweep_status(harness, ns, "pr"), what="the lagging trial pruned")
        record = status["trials"][1]
        assert record["state"] == "Pruned" and record["value"] == 12.0 and "pruned at 200 steps" in record["message"]
        wait_for(lambda: trials(harness, ns)["pr-t001"]["spec"].get("suspend") is True, what="suspended")
        wait_for(lambda: "pr-t001-head" not in harness.pods(ns), what="its pods deleted")
        status = wait_for(lambda: sweep_status(harness, ns, "pr").get("phase") == "Succeeded" and
                          sweep_status(harness, ns, "pr"))
        assert status["best"]["name"] == "pr-t000"
        wait_for(lambda: "TrialPruned" in {e["reason"] for e in harness.events(ns)}, what="a TrialPruned event")
    finally:
        leader.close()
        lagger.close()


def test_an_operator_restart_mid_sweep_neither_loses_nor_duplicates_trials(harness, ns):
    apply(harness, ns, sweep_body("rs", maxTrials=4, parallelism=2, search={"algorithm": "tpe", "seed": 5,
                                                                           "startupTrials": 1}))
    wait_for(lambda: len(trials(harness, ns)) == 2)
    before = sweep_status(harness, ns, "rs")["trials"]
    harness.stop_operator()
    finish(harness, ns, "rs-t000", 10.0)  # while no operator runs
    harness.start_operator()
    wait_for(lambda: len(trials(harness, ns)) == 3, what="the third trial after the restart")
    finish(harness, ns, "rs-t001", 20.0)
    harness.restart_operator()
    finish(harness, ns, "rs-t002", 30.0)
    wait_for(lambda: len(trials(harness, ns)) == 4)
    finish(harness, ns, "rs-t003", 5.0)
    status = wait_for(lambda: sweep_status(harness, ns, "rs").get("phase") == "Succeeded" and
                      sweep_status(harness, ns, "rs"))
    assert [t["name"] for t in status["trials"]] == [f"rs-t{n:03d}" for n in range(4)]
    assert [t["params"] for t in status["trials"][:2]] == [t["params"] for t in before]
    for name in trials(harness, ns):
        assert harness.created_count(ns, PLURAL, name, GROUP) == 1, name
    assert status["best"]["name"] == "rs-t002"


def test_suspending_the_sweep_suspends_its_trials_and_resuming_resumes_them(harness, ns):
    apply(harness, ns, sweep_body("su", maxTrials=3, parallelism=2))
    wait_for(lambda: len(trials(harness, ns)) == 2)
    harness.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, SWEEPS, "su", {"spec": {"suspend": True}},
                                                  _content_type="application/merge-patch+json")
    wait_for(lambda: all(t["spec"].get("suspend") for t in trials(harness, ns).values()), what="trials suspended")
    assert wait_for(lambda: sweep_status(harness, ns, "su").get("phase") == "Suspended")
    harness.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, SWEEPS, "su", {"spec": {"suspend": False}},
                                                  _content_type="application/merge-patch+json")
    wait_for(lambda: not any(t["spec"].get("suspend") for t in trials(harness, ns).values()), what="resumed")
    assert wait_for(lambda: sweep_status(harness, ns, "su").get("phase") == "Running")
    assert len(trials(harness, ns)) == 2


def test_deleting_the_sweep_deletes_its_trials(harness, ns):
    apply(harness, ns, sweep_body("del", maxTrials=2, parallelism=2))
    wait_for(lambda: len(trials(harness, ns)) == 2 and len(harness.pods(ns)) >= 2)
    harness.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, SWEEPS, "del")
    wait_for(lambda: trials(harness, ns) == {}, what="the trials deleted with the sweep")
    wait_for(lambda: harness.pods(ns) == {}, what="and their pods")


def test_max_failed_trials_fails_the_sweep_naming_the_trials(harness, ns):
    apply(harness, ns, sweep_body("mf", maxTrials=4, parallelism=2, maxFailedTrials=1))
    wait_for(lambda: len(trials(harness, ns)) == 2)
    finish(harness, ns, "mf-t000", None, ok=False)
    wait_for(lambda: "mf-t002" in trials(harness, ns))
    finish(harness, ns, "mf-t001", None, ok=False)
    status = wait_for(lambda: sweep_status(harness, ns, "mf").get("phase") == "Failed" and
                      sweep_status(harness, ns, "mf"), what="the sweep to fail")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "MaxFailedTrialsExceeded"
    assert "mf-t000" in failed["message"] and "mf-t001" in failed["message"]
    assert status["trialsFailed"] == 2
    assert status["trials"][2]["state"] == "Pruned"  # what still ran was stopped
    wait_for(lambda: trials(harness, ns)["mf-t002"]["spec"].get("suspend") is True)
    assert "mf-t003" not in trials(harness, ns)


def test_an_invalid_sweep_fails_naming_the_field(harness, ns):
    body = sweep_body("bad", maxTrials=2)
    body["spec"]["parameters"] = [{"path": "config.lrr", "type": "float", "low": 0.1, "high": 0.2}]
    apply(harness, ns, body)
    status = wait_for(lambda: sweep_status(harness, ns, "bad").get("phase") == "Failed" and
                      sweep_status(harness, ns, "bad"))
    assert "spec.parameters[0].path" in status["message"]
    assert next(c for c in status["conditions"] if c["type"] == "Failed")["reason"] == "InvalidSpec"
    assert trials(harness, ns) == {}


def test_a_status_write_from_a_stale_read_is_refused(harness, ns):
    """The durable state is written with the resourceVersion it was read at: an operator acting on an
    old copy (a lost lease) gets a conflict instead of overwriting newer trials."""
    from kubernetes.client import ApiException

    from kuberl.operator.cluster import Cluster
    from kuberl.operator.sweep_reconcile import SweepApi

    apply(harness, ns, sweep_body("st", maxTrials=2, parallelism=1))
    wait_for(lambda: len(trials(harness, ns)) == 1)
    api = SweepApi(Cluster(harness.api))
    stale = api.sweep(ns, "st")
    harness.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, SWEEPS, "st", {"metadata": {"labels": {"x": "y"}}},
                                                  _content_type="application/merge-patch+json")
    with pytest.raises(ApiException) as refused:
        api.patch_status(ns, "st", stale["metadata"]["resourceVersion"], {"trials": []})
    assert refused.value.status == 409
    assert len(sweep_status(harness, ns, "st")["trials"]) == 1


def test_pbt_rounds_a_laggard_takes_the_leaders_checkpoint_and_a_restart_creates_nothing_twice(harness, ns):
    """Population 2, rounds of 500 steps up to 1000: after round 0 the laggard's round-1 run restores the
    leader's checkpoint with the leader's lr x0.8 or x1.2; the operator is stopped mid-round twice."""
    apply(harness, ns, sweep_body("pbt", parallelism=2, search={"algorithm": "pbt", "seed": 7, "pbt": {
        "populationSize": 2, "perturbationInterval": 500, "resampleProbability": 0.0}}))
    wait_for(lambda: sorted(trials(harness, ns)) == ["pbt-t000-r00", "pbt-t001-r00"], what="round 0's runs")
    first = trials(harness, ns)
    assert [first[n]["spec"]["stop"]["timesteps"] for n in sorted(first)] == [500, 500]
    assert first["pbt-t000-r00"]["metadata"]["labels"]["kuberl.io/pbt-round"] == "0"
    start = {t["name"]: t["params"] for t in sweep_status(harness, ns, "pbt")["trials"]}
    finish(harness, ns, "pbt-t000-r00", 10.0, timesteps=500)
    harness.stop_operator()  # mid-round: one member through, the other not
    finish(harness, ns, "pbt-t001-r00", 50.0, timesteps=500)
    harness.start_operator()
    wait_for(lambda: len(trials(harness, ns)) == 4, what="round 1's runs")
    runs = trials(harness, ns)
    laggard, leader = runs["pbt-t000-r01"]["spec"], runs["pbt-t001-r01"]["spec"]
    assert laggard["checkpoint"]["restoreFrom"] == f"s3://bucket/runs/{ns}/pbt-t001-r00/checkpoints/5"
    assert leader["checkpoint"]["restoreFrom"] == f"s3://bucket/runs/{ns}/pbt-t001-r00/checkpoints/5"
    assert laggard["stop"]["timesteps"] == leader["stop"]["timesteps"] == 1000
    assert leader["config"]["lr"] == start["pbt-t001"]["config.lr"]
    assert laggard["config"]["lr"] / start["pbt-t001"]["config.lr"] in (pytest.approx(0.8), pytest.approx(1.2)) \
        or laggard["config"]["lr"] in (0.0001, 0.003)  # clipped to the range
    status = sweep_status(harness, ns, "pbt")
    assert status["pbtRound"] == 1 and status["trials"][0]["params"]["config.lr"] == laggard["config"]["lr"]
    assert status["trials"][0]["intermediate"] == [[500.0, 10.0]]
    # Every member and round has a seed of its own, and the status lists each member's by round.
    assert [t["seeds"] for t in status["trials"]] == [
        [first["pbt-t000-r00"]["spec"]["config"]["seed"], laggard["config"]["seed"]],
        [first["pbt-t001-r00"]["spec"]["config"]["seed"], leader["config"]["seed"]]]
    assert len({seed for t in status["trials"] for seed in t["seeds"]}) == 4
    assert laggard["config"]["annealTimesteps"] == leader["config"]["annealTimesteps"] == 1000
    wait_for(lambda: "PBTRound" in {e["reason"] for e in harness.events(ns)}, what="a PBTRound event")

    finish(harness, ns, "pbt-t001-r01", 70.0)
    harness.restart_operator()
    finish(harness, ns, "pbt-t000-r01", 90.0)
    status = wait_for(lambda: sweep_status(harness, ns, "pbt").get("phase") == "Succeeded" and
                      sweep_status(harness, ns, "pbt"), what="the sweep to succeed")
    assert status["best"]["name"] == "pbt-t000" and status["best"]["value"] == 90.0
    assert [t["intermediate"] for t in status["trials"]] == [[[500.0, 10.0], [1000.0, 90.0]],
                                                             [[500.0, 50.0], [1000.0, 70.0]]]
    assert sorted(trials(harness, ns)) == ["pbt-t000-r00", "pbt-t000-r01", "pbt-t001-r00", "pbt-t001-r01"]
    for name in trials(harness, ns):
        assert harness.created_count(ns, PLURAL, name, GROUP) == 1, name
