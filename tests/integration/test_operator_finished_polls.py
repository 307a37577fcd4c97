"""A finished experiment costs the API server nothing once its pods are gone: the real operator (over the API
emulator, polling every 0.2 s) reconciles it at its TTL's expiry, then no more until its spec changes."""

from __future__ import annotations

import time

from kuberl.operator import metrics
from kuberl_testing.operator_harness import OperatorHarness, experiment_body, wait_for

NS = "finished"


def reconciles() -> float:
    return sum(sample.value for family in metrics.RECONCILES.collect() for sample in family.samples
               if sample.name.endswith("_total"))


def test_a_finished_experiment_is_not_polled_once_its_ttl_deleted_its_pods():
    with OperatorHarness([NS], env={"KUBERL_STATUS_POLL_SECONDS": "0.2"}) as harness:
        harness.apply(NS, experiment_body("done", ttlSecondsAfterFinished=1, workers={"replicas": 0}))
        wait_for(lambda: "done-head" in harness.pods(NS), what="the head")
        harness.set_pod_status(NS, "done-head", "Succeeded", exit_code=0,
                               message={"result": "Succeeded", "message": "done", "iteration": 1})
        wait_for(lambda: harness.status(NS, "done").get("phase") == "Succeeded", what="Succeeded")
        wait_for(lambda: not harness.pods(NS), what="the TTL deletes the head")

        def quiet_for_ten_polls() -> bool:  # the pod's own deletion events bring a pass or two, then nothing
            before = reconciles()
            time.sleep(2.0)
            return reconciles() == before
        wait_for(quiet_for_ten_polls, what="a finished experiment with no pods left to no longer be reconciled")
        settled = reconciles()
        harness.patch_spec(NS, "done", {"ttlSecondsAfterFinished": 5})  # an edit still gets its pass
        wait_for(lambda: reconciles() > settled, what="a pass for the edit")
        assert harness.get(NS, "done")["status"]["phase"] == "Succeeded"
