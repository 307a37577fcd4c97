"""The real Kopf operator against the API emulator over HTTP: every lifecycle branch.

No pods run here: the tests write pod phases, IPs and exit codes through the API as a kubelet
would, and serve the trainer's /status from a small HTTP server on a loopback address.
"""

from __future__ import annotations

import base64
import time

import yaml

from kuberl.api.defaults import SET_FIELDS_ANNOTATION
from kuberl_testing.fault_figures import report_figures
from kuberl_testing.operator_fixtures import operator_fixtures
from kuberl_testing.operator_harness import TrainerStatusServer, experiment_body, wait_for

STATUS_PORT, harness, ns = operator_fixtures("life", 18)


def phase_is(h, ns, name, phase):
    return lambda: h.status(ns, name).get("phase") == phase


def pod_names(h, ns):
    return sorted(h.pods(ns))


def test_apply_creates_every_child_with_owner_references(harness, ns):
    body = harness.apply(ns, experiment_body("exp", workers={"replicas": 2}))
    uid = body["metadata"]["uid"]
    wait_for(lambda: len(harness.pods(ns)) == 3, what="head and two workers")
    assert pod_names(harness, ns) == ["exp-head", "exp-worker-0", "exp-worker-1"]
    children = {
        "configmaps": ["exp-config"], "services": ["exp-head"], "secrets": ["exp-ray-token"],
    }
    for plural, expected in children.items():
        assert [o["metadata"]["name"] for o in harness.objects(ns, plural)] == expected
    policies = harness.objects(ns, "networkpolicies", "networking.k8s.io")
    assert [p["metadata"]["name"] for p in policies] == ["exp-ray"]
    for obj in [*harness.pods(ns).values(), *harness.objects(ns, "configmaps"), policies[0]]:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
    config = yaml.safe_load(harness.objects(ns, "configmaps")[0]["data"]["experiment.yaml"])
    # and the rollouts and replay fields the manifest set (none): the trainer applies the task kind's defaults
    assert config["metadata"] == {"name": "exp", "namespace": ns, "annotations": {SET_FIELDS_ANNOTATION: ""}}
    token = base64.b64decode(harness.objects(ns, "secrets")[0]["data"]["token"])
    assert len(token) >= 32
    status = wait_for(lambda: harness.status(ns, "exp").get("attempt") == 1 and harness.status(ns, "exp"))
    assert status["phase"] == "Pending" and status["observedGeneration"] == 1
    assert status["selector"] == "app.kubernetes.io/name=kuberl,kuberl.io/experiment=exp,kuberl.io/role=worker"
    reasons = wait_for(lambda: {e["reason"] for e in harness.events(ns)} >= {"HeadCreated"} and
                       {e["reason"] for e in harness.events(ns)})
    assert "HeadCreated" in reasons


def test_running_reports_trainer_progress_and_ready(harness, ns):
    trainer = TrainerStatusServer({"phase": "Running", "attempt": 1, "iteration": 3, "timesteps": 300,
                                   "episodeReturnMean": 42.5, "evaluationReturnMean": None, "lastCheckpoint": None},
                                  STATUS_PORT)
    try:
        harness.apply(ns, experiment_body("run", workers={"replicas": 1}))
        wait_for(lambda: len(harness.pods(ns)) == 2)
        harness.set_pod_status(ns, "run-head", "Running", ip=trainer.ip)
        harness.set_pod_status(ns, "run-worker-0", "Running", ip="10.0.0.2")
        wait_for(lambda: harness.condition(ns, "run", "Ready").get("status") == "True", what="Ready=True")
        status = harness.status(ns, "run")
        assert status["phase"] == "Running" and status["workers"] == 1
        assert status["iteration"] == 3 and status["timesteps"] == 300 and status["episodeReturnMean"] == 42.5
        assert "evaluationReturnMean" not in status  # no evaluation yet
        assert harness.condition(ns, "run", "Reconciling")["status"] == "False"
        trainer.body = {**trainer.body, "iteration": 9, "timesteps": 900, "evaluationReturnMean": 61.5}
        wait_for(lambda: harness.status(ns, "run").get("iteration") == 9, what="progress update")
        assert harness.status(ns, "run")["evaluationReturnMean"] == 61.5  # copied from the trainer's /status
    finally:
        trainer.close()


def test_lost_worker_pods_are_recreated(harness, ns):
    harness.apply(ns, experiment_body("wrk", workers={"replicas": 2}))
    wait_for(lambda: len(harness.pods(ns)) == 3)
    first_uid = harness.pods(ns)["wrk-worker-1"]["metadata"]["uid"]
    failed = time.monotonic()
    harness.set_pod_status(ns, "wrk-worker-1", "Failed", exit_code=137, message="OOMKilled")
    wait_for(lambda: harness.pods(ns).get("wrk-worker-1", {}).get("metadata", {}).get("uid") not in (None, first_uid),
             what="a new worker-1")
    failed_replaced = time.monotonic() - failed
    deleted = time.monotonic()
    harness.core.delete_namespaced_pod("wrk-worker-0", ns)
    pod = wait_for(lambda: harness.pods(ns).get("wrk-worker-0"), what="worker-0 recreated")
    report_figures("worker-pod-failed-or-deleted", failed_pod_replaced_seconds=failed_replaced,
                   deleted_pod_replaced_seconds=time.monotonic() - deleted)
    assert pod["metadata"]["annotations"]["kuberl.io/attempt"] == "1"
    assert "exp" not in harness.pods(ns)  # nothing else appeared
    assert harness.created_count(ns, "pods", "wrk-head") == 1


def test_failed_head_is_recreated_with_the_next_attempt_until_backoff_limit(harness, ns):
    harness.apply(ns, experiment_body("hd", backoffLimit=1, workers={"replicas": 1}))
    wait_for(lambda: "hd-head" in harness.pods(ns))
    failed = time.monotonic()
    harness.set_pod_status(ns, "hd-head", "Failed", exit_code=1, message={"result": "Failed", "reason": "Crash",
                                                                           "message": "ray died"})
    head = wait_for(lambda: harness.pods(ns).get("hd-head", {}).get("metadata", {}).get("annotations", {})
                    .get("kuberl.io/attempt") == "2" and harness.pods(ns)["hd-head"], what="attempt 2 head")
    head_replaced = time.monotonic() - failed
    env = {e["name"]: e.get("value") for e in head["spec"]["containers"][0]["env"]}
    assert env["KUBERL_ATTEMPT"] == "2"
    wait_for(lambda: harness.status(ns, "hd").get("attempt") == 2)
    worker = wait_for(lambda: harness.pods(ns).get("hd-worker-0", {}).get("metadata", {}).get("annotations", {})
                      .get("kuberl.io/attempt") == "2", what="worker of attempt 2")
    assert worker
    failed_again = time.monotonic()
    harness.set_pod_status(ns, "hd-head", "Failed", exit_code=1, message="segfault")
    wait_for(phase_is(harness, ns, "hd", "Failed"), what="Failed after backoffLimit")
    report_figures("head-pod-failed-until-backoffLimit", head_replaced_seconds=head_replaced,
                   failed_phase_after_last_failure_seconds=time.monotonic() - failed_again)
    stalled = harness.condition(ns, "hd", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "BackoffLimitExceeded"
    wait_for(lambda: "hd-worker-0" not in harness.pods(ns), what="workers deleted")
    assert "hd-head" in harness.pods(ns)  # kept for its logs
    assert harness.created_count(ns, "pods", "hd-head") == 2
    # the event follows the status patch: wait for it rather than read once
    wait_for(lambda: {"HeadFailed", "BackoffLimitExceeded"} <= {e["reason"] for e in harness.events(ns)
                                                                 if e["type"] == "Warning"}, what="warnings")


def test_head_succeeded_records_the_summary_and_deletes_workers(harness, ns):
    harness.apply(ns, experiment_body("ok", workers={"replicas": 2}))
    wait_for(lambda: len(harness.pods(ns)) == 3)
    summary = {"result": "Succeeded", "reason": "StopCriterion", "message": "stop.timesteps reached",
               "iteration": 5, "timesteps": 1024, "episodeReturnMean": 77.0,
               "lastCheckpoint": "s3://bucket/runs/x/ok/checkpoints/000005"}
    harness.set_pod_status(ns, "ok-head", "Succeeded", exit_code=0, message=summary)
    wait_for(phase_is(harness, ns, "ok", "Succeeded"))
    status = harness.status(ns, "ok")
    assert status["timesteps"] == 1024 and status["lastCheckpoint"].endswith("000005")
    assert status["completionTime"] and status["message"] == "stop.timesteps reached"
    assert harness.condition(ns, "ok", "Succeeded")["status"] == "True"
    wait_for(lambda: pod_names(harness, ns) == ["ok-head"], what="workers deleted")


def test_invalid_spec_fails_with_a_warning_and_no_pods(harness, ns):
    harness.apply(ns, experiment_body("bad", algorithm="apex-dqn", replay={"shards": 0}))
    wait_for(phase_is(harness, ns, "bad", "Failed"))
    stalled = harness.condition(ns, "bad", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec"
    assert "spec.replay.shards" in stalled["message"]
    assert harness.condition(ns, "bad", "Succeeded")["status"] == "False"
    events = wait_for(lambda: [e for e in harness.events(ns) if e["reason"] == "InvalidSpec"])
    assert events[0]["type"] == "Warning" and "spec.replay.shards" in events[0]["message"]
    assert harness.pods(ns) == {} and harness.objects(ns, "configmaps") == []


def test_trainer_exit_code_2_is_invalid_spec_and_not_retried(harness, ns):
    harness.apply(ns, experiment_body("envbad", env={"id": "NoSuchEnv-v9"}, workers={"replicas": 0}))
    wait_for(lambda: "envbad-head" in harness.pods(ns))
    harness.set_pod_status(ns, "envbad-head", "Failed", exit_code=2, message={
        "result": "InvalidSpec", "reason": "InvalidSpec", "message": "spec.env.id: unknown env 'NoSuchEnv-v9'"})
    wait_for(phase_is(harness, ns, "envbad", "Failed"))
    assert harness.condition(ns, "envbad", "Stalled")["reason"] == "InvalidSpec"
    assert "spec.env.id" in harness.status(ns, "envbad")["message"]
    assert harness.status(ns, "envbad")["attempt"] == 1
    assert harness.created_count(ns, "pods", "envbad-head") == 1


def test_missing_secret_and_image_pull_errors_fail_fast(harness, ns):
    harness.apply(ns, experiment_body("nosecret", storage={"uri": "s3://bucket/p", "secretRef": {"name": "absent"}}))
    wait_for(phase_is(harness, ns, "nosecret", "Failed"))
    assert harness.condition(ns, "nosecret", "Stalled")["reason"] == "SecretNotFound"
    assert "absent" in harness.status(ns, "nosecret")["message"]
    harness.apply(ns, experiment_body("pull", image="registry.invalid/none:0", workers={"replicas": 0}))
    wait_for(lambda: "pull-head" in harness.pods(ns))
    harness.set_pod_status(ns, "pull-head", "Pending", waiting="ImagePullBackOff")
    wait_for(phase_is(harness, ns, "pull", "Failed"))
    assert harness.condition(ns, "pull", "Stalled")["reason"] == "ImagePullFailed"
    assert "registry.invalid/none:0" in harness.status(ns, "pull")["message"]
    wait_for(lambda: "pull-head" not in harness.pods(ns), what="pod deleted")
    assert not any(n.startswith("nosecret") for n in harness.pods(ns))


def test_a_secret_gone_under_a_running_experiment_keeps_it_running_and_a_lost_worker_waits_for_it(harness, ns):
    secret = {"metadata": {"name": "s3"}, "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}}
    harness.core.create_namespaced_secret(ns, secret)
    harness.apply(ns, experiment_body("rot", storage={"uri": "s3://bucket/p", "secretRef": {"name": "s3"}},
                                      workers={"replicas": 1}))
    wait_for(lambda: len(harness.pods(ns)) == 2, what="head and worker")
    harness.core.delete_namespaced_secret("s3", ns)
    harness.core.delete_namespaced_pod("rot-worker-0", ns)  # lost while the Secret is gone
    wait_for(lambda: harness.condition(ns, "rot", "Reconciling").get("reason") == "SecretNotFound",
             what="the wait said")
    assert harness.status(ns, "rot")["phase"] != "Failed" and list(harness.pods(ns)) == ["rot-head"]
    harness.core.create_namespaced_secret(ns, secret)
    wait_for(lambda: "rot-worker-0" in harness.pods(ns), what="the worker, once the Secret is back")
    assert harness.created_count(ns, "pods", "rot-head") == 1


def test_an_invalid_edit_of_a_running_experiment_keeps_its_pods(harness, ns):
    harness.apply(ns, experiment_body("edit", workers={"replicas": 1}))
    wait_for(lambda: len(harness.pods(ns)) == 2, what="head and worker")
    config_before = harness.objects(ns, "configmaps")[0]["data"]
    harness.patch_spec(ns, "edit", {"storage": {"uri": "file:///tmp/runs"}})  # the CRD takes it, a cluster cannot
    stalled = wait_for(lambda: harness.condition(ns, "edit", "Stalled").get("reason") == "InvalidSpec"
                       and harness.condition(ns, "edit", "Stalled"), what="the refusal")
    assert stalled["status"] == "True" and "spec.storage.uri" in stalled["message"]
    assert harness.status(ns, "edit")["phase"] != "Failed"
    assert pod_names(harness, ns) == ["edit-head", "edit-worker-0"]
    assert harness.objects(ns, "configmaps")[0]["data"] == config_before


def test_suspend_deletes_pods_and_resume_starts_the_next_attempt(harness, ns):
    harness.apply(ns, experiment_body("sus", workers={"replicas": 1}))
    wait_for(lambda: len(harness.pods(ns)) == 2)
    harness.patch_spec(ns, "sus", {"suspend": True})
    wait_for(phase_is(harness, ns, "sus", "Suspended"))
    wait_for(lambda: harness.pods(ns) == {}, what="pods deleted")
    assert [c["metadata"]["name"] for c in harness.objects(ns, "configmaps")] == ["sus-config"]  # storage kept
    harness.patch_spec(ns, "sus", {"suspend": False})
    head = wait_for(lambda: harness.pods(ns).get("sus-head"), what="head of the resumed run")
    assert head["metadata"]["annotations"]["kuberl.io/attempt"] == "2"
    wait_for(lambda: "sus-worker-0" in harness.pods(ns))
    annotations = harness.get(ns, "sus")["metadata"].get("annotations") or {}
    assert annotations.get("kuberl.io/restarts", "0") == "0"  # suspend closed attempt 1; it failed nothing


def test_scale_subresource_changes_workers(harness, ns):
    harness.apply(ns, experiment_body("scl", workers={"replicas": 1}))
    wait_for(lambda: len(harness.pods(ns)) == 2)
    harness.custom.patch_namespaced_custom_object_scale("kuberl.io", "v1alpha1", ns, "rlexperiments", "scl",
                                                        {"spec": {"replicas": 3}},
                                                        _content_type="application/merge-patch+json")
    wait_for(lambda: pod_names(harness, ns) == ["scl-head", "scl-worker-0", "scl-worker-1", "scl-worker-2"])
    for name in pod_names(harness, ns):
        harness.set_pod_status(ns, name, "Running", ip="10.1.0.1")
    wait_for(lambda: harness.status(ns, "scl").get("workers") == 3, what="status.workers")
    scale = harness.custom.get_namespaced_custom_object_scale("kuberl.io", "v1alpha1", ns, "rlexperiments", "scl")
    assert scale["status"]["replicas"] == 3 and "kuberl.io/role=worker" in scale["status"]["selector"]
    harness.patch_spec(ns, "scl", {"workers": {"replicas": 1}})
    wait_for(lambda: pod_names(harness, ns) == ["scl-head", "scl-worker-0"], what="scaled down")


def test_immutable_change_is_refused_in_a_condition_and_not_half_applied(harness, ns):
    harness.apply(ns, experiment_body("imm", workers={"replicas": 1}))
    wait_for(lambda: len(harness.pods(ns)) == 2)
    config_before = harness.objects(ns, "configmaps")[0]["data"]
    harness.patch_spec(ns, "imm", {"algorithm": "dqn", "workers": {"replicas": 2}})
    stalled = wait_for(lambda: harness.condition(ns, "imm", "Stalled").get("reason") == "SpecChangeRefused"
                       and harness.condition(ns, "imm", "Stalled"), what="refusal condition")
    assert stalled["status"] == "True" and "spec.algorithm" in stalled["message"]
    assert stalled["observedGeneration"] == 2
    wait_for(lambda: "imm-worker-1" in harness.pods(ns), what="the mutable part (replicas) applies")
    assert harness.objects(ns, "configmaps")[0]["data"] == config_before
    assert harness.created_count(ns, "pods", "imm-head") == 1
    events = wait_for(lambda: [e for e in harness.events(ns) if e["reason"] == "SpecChangeRefused"])
    assert events[0]["type"] == "Warning"


def test_ttl_after_finished_deletes_the_pods_but_keeps_the_resource(harness, ns):
    harness.apply(ns, experiment_body("ttl", ttlSecondsAfterFinished=1, workers={"replicas": 0}))
    wait_for(lambda: "ttl-head" in harness.pods(ns))
    harness.set_pod_status(ns, "ttl-head", "Succeeded", exit_code=0, message={"result": "Succeeded"})
    wait_for(phase_is(harness, ns, "ttl", "Succeeded"))
    wait_for(lambda: harness.pods(ns) == {}, timeout=10, what="pods deleted after the TTL")
    assert harness.status(ns, "ttl")["phase"] == "Succeeded"


def test_delete_removes_every_child(harness, ns):
    harness.apply(ns, experiment_body("gone", workers={"replicas": 2}))
    wait_for(lambda: len(harness.pods(ns)) == 3)
    harness.delete(ns, "gone")
    wait_for(lambda: harness.pods(ns) == {}, what="pods gone")
    for plural in ("configmaps", "services", "secrets"):
        assert harness.objects(ns, plural) == []
    assert harness.objects(ns, "networkpolicies", "networking.k8s.io") == []


def test_no_finalizer_and_a_legacy_one_does_not_block_deletion(harness, ns):
    harness.apply(ns, experiment_body("plain", workers={"replicas": 0}))
    wait_for(lambda: "plain-head" in harness.pods(ns))
    assert not harness.get(ns, "plain")["metadata"].get("finalizers")  # deleting never waits on the operator

    # An experiment from an operator version whose Kopf timers put a finalizer on it.
    body = experiment_body("legacy", workers={"replicas": 0})
    body["metadata"]["finalizers"] = ["kopf.zalando.org/KopfFinalizerMarker", "example.com/keep"]
    harness.apply(ns, body)
    wait_for(lambda: "legacy-head" in harness.pods(ns))
    harness.delete(ns, "legacy")
    wait_for(lambda: harness.get(ns, "legacy")["metadata"].get("finalizers") == ["example.com/keep"],
             what="the legacy finalizer removed, the other kept")
    harness.custom.patch_namespaced_custom_object("kuberl.io", "v1alpha1", ns, "rlexperiments", "legacy",
                                                  {"metadata": {"finalizers": None}},
                                                  _content_type="application/merge-patch+json")
    wait_for(lambda: "legacy-head" not in harness.pods(ns), what="the experiment and its pods gone")


def test_a_pod_the_api_server_refuses_fails_the_experiment_once(harness, ns):
    # As a missing serviceAccountName or priorityClassName would: a 422/403 no retry can fix.
    harness.emulator_thread.call(harness.emulator.inject_fault, "POST", rf"/namespaces/{ns}/pods$", 422, 1000, 0)
    try:
        harness.apply(ns, experiment_body("refused", workers={"replicas": 1}))
        wait_for(phase_is(harness, ns, "refused", "Failed"), what="Failed")
        stalled = harness.condition(ns, "refused", "Stalled")
        assert stalled["reason"] == "CreateRejected" and "(422)" in stalled["message"]

        def rejections() -> list[dict]:
            return [e for e in harness.events(ns) if e["type"] == "Warning" and e["reason"] == "CreateRejected"]

        wait_for(rejections, what="the CreateRejected event")  # written just after the status
        version = harness.get(ns, "refused")["metadata"]["resourceVersion"]
        hits = harness.emulator_thread.call(harness.emulator.fault_hits)
        time.sleep(3)  # no retry loop: nothing more is tried or written
        assert harness.emulator_thread.call(harness.emulator.fault_hits) == hits
        assert harness.get(ns, "refused")["metadata"]["resourceVersion"] == version
        assert len(rejections()) == 1
    finally:
        harness.emulator_thread.call(harness.emulator.clear_faults)
