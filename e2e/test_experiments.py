"""End-to-end scenarios: an RLExperiment applied to a cluster, from the first pod to the files in S3.

Written once against the Kubernetes API and S3; `cluster` is the local stand-in or kind.
"""

from __future__ import annotations

import time

import pytest
from experiments import PhaseWatch, RunFiles, tiny_ppo, unannounced_phases, unique_name

EPISODE_KEYS = {"experiment", "worker", "episode", "env", "return", "length", "policyVersion", "startTime", "endTime"}
RESULT_KEYS = {"iteration", "timesteps", "episodes", "episodeReturnMean", "envStepsPerSecond", "timeSeconds"}

pytestmark = pytest.mark.timeout(600)


def _strictly_increasing(values: list[int]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))


def test_apply_runs_to_success_with_checkpoints_traces_and_a_summary(cluster, experiments):
    name = unique_name("ok")
    phases = PhaseWatch(experiments, name)
    experiments.apply(tiny_ppo(name, cluster))
    experiments.wait(name, lambda: experiments.running_pod(name, "head"), "the head pod to run")
    status = experiments.wait_phase(name, "Succeeded", "Failed")
    assert status["phase"] == "Succeeded", experiments.explain(name)
    # An Event for every phase transition, whichever path reconciled it (Running comes from the poll
    # loop reading the trainer's progress, not from a watch event).
    experiments.wait(name, lambda: phases.phases[-1:] == ["Succeeded"], "the watch to see Succeeded", timeout=30)
    phases.stop()
    assert "Running" in phases.phases, (phases.phases, phases.ended)
    experiments.wait(name, lambda: not unannounced_phases(phases.phases, experiments.events(name)),
                     f"an Event for each of the phases {phases.phases}", timeout=30)

    files = RunFiles(cluster, name)
    assert status["timesteps"] >= 2560 and status["iteration"] >= 1
    assert status["attempt"] == 1
    assert status["lastCheckpoint"].rstrip("/").startswith(files.uri + "checkpoints/")
    assert {c["type"]: c["status"] for c in status["conditions"]}["Succeeded"] == "True"
    assert status.get("completionTime")

    checkpoints = files.checkpoints()
    assert checkpoints, files.keys()
    assert checkpoints[-1]["iteration"] == status["iteration"]
    assert status["lastCheckpoint"].rstrip("/").endswith(checkpoints[-1]["key"])
    files.verify(checkpoints[-1])
    assert "checkpoints/latest" in files.keys("checkpoints/latest")

    results = files.results()
    assert results and set(results[-1]) >= RESULT_KEYS
    assert [r["iteration"] for r in results] == list(range(1, status["iteration"] + 1))
    assert results[-1]["timesteps"] == status["timesteps"]

    episodes = files.episodes()
    assert episodes and all(set(e) >= EPISODE_KEYS for e in episodes)
    assert {e["experiment"] for e in episodes} == {name}
    assert all(e["length"] >= 1 and e["env"] == "CartPole-v1" for e in episodes)

    experiments.wait(name, lambda: not experiments.pods(name, "worker"), "the workers to be deleted after success")


def test_a_lost_worker_is_recreated_and_the_run_still_succeeds(cluster, experiments):
    name = unique_name("worker-loss")
    experiments.apply(tiny_ppo(name, cluster, stop={"timesteps": 6400}, ttlSecondsAfterFinished=3))
    worker = experiments.wait(name, lambda: experiments.running_pod(name, "worker"), "a running worker pod")
    experiments.wait_phase(name, "Running")
    cluster.kill_pod_process(cluster.namespace, worker.metadata.name)

    def replaced() -> bool:
        pod = experiments.running_pod(name, "worker")
        return pod is not None and pod.metadata.uid != worker.metadata.uid

    experiments.wait(name, replaced, "a new worker pod in place of the killed one")
    status = experiments.wait_phase(name, "Succeeded", "Failed")
    assert status["phase"] == "Succeeded", experiments.explain(name)
    assert status["attempt"] == 1  # losing a worker does not restart the head
    assert status["timesteps"] >= 6400
    # ttlSecondsAfterFinished: the pods go, the resource and its summary stay.
    experiments.wait(name, lambda: not experiments.pods(name), "the pods to go after the TTL", timeout=60)
    assert experiments.status(name)["phase"] == "Succeeded"


def test_an_operator_restart_mid_run_makes_nothing_twice(cluster, experiments):
    name = unique_name("restart")
    experiments.apply(tiny_ppo(name, cluster, stop={"timesteps": 5120}))
    experiments.wait_phase(name, "Running")
    before = experiments.child_uids(name)
    head = experiments.running_pod(name, "head")
    cluster.restart_operator()

    status = experiments.wait_phase(name, "Succeeded", "Failed")
    assert status["phase"] == "Succeeded", experiments.explain(name)
    assert status["attempt"] == 1
    after = experiments.child_uids(name)
    # The same objects, not recreated ones: same names and uids (the token Secret too, or workers
    # would not get into the head's Ray cluster); the workers are gone after success.
    assert {p.metadata.name: p.metadata.uid for p in experiments.pods(name, "head")} == \
        {head.metadata.name: head.metadata.uid}
    for kind in ("services", "configmaps", "secrets", "networkpolicies"):
        assert after[kind] == before[kind], (kind, before[kind], after[kind])


def test_a_failed_head_is_recreated_and_attempt_2_resumes_from_the_checkpoint(cluster, experiments):
    name = unique_name("head-loss")
    experiments.apply(tiny_ppo(name, cluster, stop={"timesteps": 7680}, checkpoint={"everyIterations": 1}))
    files = RunFiles(cluster, name)
    head = experiments.wait(name, lambda: experiments.running_pod(name, "head"), "the head pod to run")
    before = experiments.wait(name, files.checkpoints, "a first complete checkpoint", timeout=300)
    cluster.kill_pod_process(cluster.namespace, head.metadata.name)

    experiments.wait(name, lambda: experiments.status(name).get("attempt") == 2, "attempt 2")
    status = experiments.wait_phase(name, "Succeeded", "Failed", timeout=360)
    assert status["phase"] == "Succeeded", experiments.explain(name)
    assert status["attempt"] == 2

    checkpoints = files.checkpoints()
    first_attempt = [c["iteration"] for c in checkpoints if c["attempt"] == 1]
    second_attempt = [c["iteration"] for c in checkpoints if c["attempt"] == 2]
    assert first_attempt and second_attempt, checkpoints
    # Resumed, not restarted: attempt 2 only wrote checkpoints after the ones attempt 1 had written.
    assert before[-1]["iteration"] <= max(first_attempt) < min(second_attempt)
    results = files.results()
    assert _strictly_increasing([r["iteration"] for r in results])
    assert _strictly_increasing([r["timesteps"] for r in results])
    assert results[-1]["iteration"] == status["iteration"] == max(second_attempt)


def test_an_invalid_spec_fails_at_once_with_no_pods(cluster, experiments):
    name = unique_name("invalid")
    experiments.apply(tiny_ppo(name, cluster, algorithm="apex-dqn", config={}, replay={"shards": 0}))
    status = experiments.wait_phase(name, "Failed", timeout=60)
    stalled = experiments.condition(name, "Stalled")
    assert stalled.get("status") == "True" and stalled.get("reason") == "InvalidSpec", status
    assert experiments.condition(name, "Succeeded").get("status") == "False"
    assert "replay.shards" in stalled.get("message", "")
    assert experiments.pods(name) == []
    experiments.wait(name, lambda: any(e.type == "Warning" and e.reason == "InvalidSpec"
                                       for e in experiments.events(name)), what="an InvalidSpec warning", timeout=30)


def test_an_image_that_cannot_be_pulled_fails_the_experiment_without_retrying(cluster, experiments):
    name = unique_name("no-image")
    experiments.apply(tiny_ppo(name, cluster, image=cluster.unpullable_image))
    status = experiments.wait_phase(name, "Failed", timeout=180)
    stalled = experiments.condition(name, "Stalled")
    assert stalled.get("status") == "True" and stalled.get("reason") == "ImagePullFailed", status
    assert cluster.unpullable_image in stalled.get("message", "")
    assert status.get("attempt", 0) <= 1  # failed fast: no head restarts


def test_a_missing_storage_secret_fails_the_experiment_with_no_pods(cluster, experiments):
    name = unique_name("no-secret")
    experiments.apply(tiny_ppo(name, cluster, storage={"secretRef": {"name": "no-such-secret"}}))
    status = experiments.wait_phase(name, "Failed", timeout=60)
    stalled = experiments.condition(name, "Stalled")
    assert stalled.get("status") == "True" and stalled.get("reason") == "SecretNotFound", status
    assert "no-such-secret" in stalled.get("message", "")
    assert not [p for p in experiments.pods(name) if p.status.phase == "Running"]


def test_deleting_an_experiment_removes_every_child(cluster, experiments):
    name = unique_name("delete")
    experiments.apply(tiny_ppo(name, cluster, stop={"timesteps": 1_000_000}))
    head = experiments.wait(name, lambda: experiments.running_pod(name, "head"), "the head pod to run")
    experiments.wait_phase(name, "Running")  # Ray's daemons and the trainer are up: all must stop
    children = experiments.children(name)
    assert all(children.values()), children  # a pod, the Service, ConfigMap, token Secret, NetworkPolicy
    experiments.delete(name)

    experiments.wait(name, lambda: experiments.get(name) is None, "the experiment to be gone", timeout=60)
    experiments.wait(name, lambda: not any(experiments.children(name).values()), "every child to be gone",
                     timeout=60)
    experiments.wait(name, lambda: not cluster.pod_has_process(cluster.namespace, head.metadata.name),
                     "the head's processes to stop", timeout=60)


def test_suspend_deletes_the_pods_and_resume_continues_from_the_checkpoint(cluster, experiments):
    name = unique_name("suspend")
    experiments.apply(tiny_ppo(name, cluster, stop={"timesteps": 5120}, checkpoint={"everyIterations": 1}))
    files = RunFiles(cluster, name)
    experiments.wait(name, files.checkpoints, "a first complete checkpoint", timeout=300)
    experiments.patch_spec(name, {"suspend": True})
    experiments.wait_phase(name, "Suspended", timeout=120)
    experiments.wait(name, lambda: not experiments.pods(name), "the pods to be deleted", timeout=120)
    suspended_at = max(c["iteration"] for c in files.checkpoints())

    experiments.patch_spec(name, {"suspend": False})
    status = experiments.wait_phase(name, "Succeeded", "Failed", timeout=360)
    assert status["phase"] == "Succeeded", experiments.explain(name)
    resumed = [c["iteration"] for c in files.checkpoints() if c["attempt"] > 1]
    assert resumed and min(resumed) > suspended_at
    assert _strictly_increasing([r["iteration"] for r in files.results()])


@pytest.mark.requires_feature("podSchedulingGates")
def test_a_queued_experiment_waits_for_kueue_then_runs_to_success(cluster, experiments):
    """Kueue admits the head and worker as one pod group: gated and Queued until admitted (on kind the
    ClusterQueue holds until the scenario releases it; on the stand-in the scenario removes the gates)."""
    name = unique_name("queued")
    manifest = tiny_ppo(name, cluster)
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": cluster.kueue_queue}
    experiments.apply(manifest)
    status = experiments.wait_phase(name, "Queued", "Failed")
    assert status["phase"] == "Queued", experiments.explain(name)
    ready = experiments.condition(name, "Ready")
    assert ready["reason"] == "Queued" and "Kueue" in ready["message"]
    pods = experiments.wait(name, lambda: len(experiments.pods(name)) == 2 and experiments.pods(name),
                            "the group's two pods")
    group = f"{name}-a1"
    for pod in pods:
        assert pod.metadata.labels["kueue.x-k8s.io/pod-group-name"] == group
        assert pod.metadata.annotations["kueue.x-k8s.io/pod-group-total-count"] == "2"
        assert "kueue.x-k8s.io/admission" in [g.name for g in pod.spec.scheduling_gates or []]
    time.sleep(5)  # held: nothing runs while the group waits
    assert experiments.status(name)["phase"] == "Queued"
    assert experiments.running_pod(name, "head") is None

    cluster.admit_queued(cluster.namespace, group)
    status = experiments.wait_phase(name, "Succeeded", "Failed")
    assert status["phase"] == "Succeeded", experiments.explain(name)
    assert status["attempt"] == 1
    phases = [e.message.split(":")[0] for e in experiments.events(name) if e.reason in ("Queued", "Succeeded")]
    assert "Queued" in phases and "Succeeded" in phases


@pytest.mark.backend_agnostic("the same operator, pods and objects as PPO's success scenario; what differs is the "
                               "trainer inside the pods, which no API server sees")
@pytest.mark.parametrize(("algorithm", "env", "config"), [
    ("impala", "CartPole-v1", {}),
    ("appo", "CartPole-v1", {}),
    ("sac", "Pendulum-v1", {"hidden": [32], "learningStarts": 256, "trainBatchSize": 64, "replayRatio": 0.25}),
])
def test_the_asynchronous_and_continuous_algorithms_run_to_success(cluster, experiments, algorithm, env, config):
    name = unique_name(algorithm)
    experiments.apply(tiny_ppo(name, cluster, algorithm=algorithm, env={"id": env}, config=config,
                               stop={"timesteps": 1024}))
    status = experiments.wait_phase(name, "Succeeded", "Failed")
    assert status["phase"] == "Succeeded", experiments.explain(name)
    assert status["timesteps"] >= 1024
    files = RunFiles(cluster, name)
    checkpoints = files.checkpoints()
    assert checkpoints and checkpoints[-1]["iteration"] == status["iteration"]
    files.verify(checkpoints[-1])
    assert {e["env"] for e in files.episodes()} == {env}
