"""`kuberl submit | list | status | logs | delete | dashboard` and kuberl.client, for RLExperiments and RLSweeps,
against the API emulator
(a real HTTP API server on loopback; no operator here: tests that need one are in e2e/test_cluster_cli.py)
and moto's S3 for the output a run leaves in its storage."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from kuberl.api.types import GROUP, PLURAL, VERSION
from kuberl.cli import main
from kuberl.client import AlreadyExists, Client, NotFound, WaitTimeout
from kuberl.trainer.storage import open_store
from kuberl.trainer.storage.logs import LogChunks
from kuberl_testing.apiserver import EmulatorThread
from kuberl_testing.apiserver.kubeconfig import write_kubeconfig
from kuberl_testing.podrunner import api_client_from_kubeconfig
from kuberl_testing.s3server import S3Server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole-ppo.yaml"

pytestmark = pytest.mark.timeout(300)


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def kuberl(kubeconfig: Path, *args: str, env: dict[str, str] | None = None, stdin: str = "") -> Ran:
    """`kuberl ARGS` with KUBECONFIG (and `env`) set, in this process: kuberl.cli.main as the console script
    runs it, its output captured (a process per call would cost seconds of imports each)."""
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update({"KUBECONFIG": str(kubeconfig), **(env or {})})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                _stdin(io.StringIO(stdin)):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Ran(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _stdin(stream: io.StringIO) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


@pytest.fixture
def api(emulator: Path) -> k8s.ApiClient:
    return api_client_from_kubeconfig(str(emulator))


def _post_event(api: k8s.ApiClient, namespace: str, name: str, reason: str, message: str, stamp: str) -> None:
    """An Event about the experiment, as the operator posts one."""
    k8s.CoreV1Api(api).create_namespaced_event(namespace, {
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLExperiment", "name": name,
                           "namespace": namespace},
        "type": "Normal", "reason": reason, "message": message, "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp})


def _set_status(api: k8s.ApiClient, namespace: str, name: str, status: dict, plural: str = PLURAL) -> None:
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, name,
                                                                    {"status": status})


def test_the_cli_submits_lists_shows_and_deletes(emulator: Path, api: k8s.ApiClient) -> None:
    submitted = kuberl(emulator, "submit", "-f", str(EXAMPLE), "--set", "storage.uri=s3://bucket/runs")
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.strip() == "rlexperiment.kuberl.io/cartpole-ppo created in namespace default"

    again = kuberl(emulator, "submit", "-f", str(EXAMPLE), "--set", "storage.uri=s3://bucket/runs")
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert again.stderr.strip() == "error: rlexperiment 'cartpole-ppo' already exists in namespace 'default'"

    _set_status(api, "default", "cartpole-ppo", {"phase": "Running", "attempt": 1, "iteration": 7,
                                                 "timesteps": 3584, "episodeReturnMean": 41.5,
                                                 "lastCheckpoint": "s3://bucket/runs/default/cartpole-ppo/checkpoints/000005"})
    _post_event(api, "default", "cartpole-ppo", "Started", "head pod cartpole-ppo-head created", "2026-11-26T10:00:00Z")
    _post_event(api, "default", "cartpole-ppo", "Running", "the trainer reports iteration 1", "2026-11-26T10:01:00Z")
    _post_event(api, "default", "someone-else", "Running", "not this experiment's", "2026-11-26T10:01:00Z")

    listed = kuberl(emulator, "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()  # no sweeps: no table of them
    assert header.split()[:4] == ["NAME", "PHASE", "ALGORITHM", "ENV"]
    assert row.split()[:7] == ["rlexperiment.kuberl.io/cartpole-ppo", "Running", "ppo", "CartPole-v1", "7", "3584",
                               "41.5"]
    assert kuberl(emulator, "list", "rlx").stdout.splitlines()[1].split()[0] == "cartpole-ppo"  # as kubectl get rlx

    status = kuberl(emulator, "status", "cartpole-ppo")
    assert status.returncode == 0, status.stderr
    assert "Phase:       Running (attempt 1)" in status.stdout
    assert "iteration 7, 3,584 timesteps, return 41.5" in status.stdout
    assert "checkpoints/000005" in status.stdout
    assert "head pod cartpole-ppo-head created" in status.stdout and "not this experiment's" not in status.stdout
    as_json = yaml.safe_load(kuberl(emulator, "status", "cartpole-ppo", "-o", "json").stdout)
    assert as_json["status"]["iteration"] == 7 and [e["reason"] for e in as_json["events"]] == ["Started", "Running"]

    deleted = kuberl(emulator, "delete", "cartpole-ppo", "--wait")
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted from namespace default" in deleted.stdout
    assert "its storage stays: s3://bucket/runs/default/cartpole-ppo" in deleted.stdout

    gone = kuberl(emulator, "status", "cartpole-ppo", "-n", "default")
    assert gone.returncode == 2
    assert gone.stderr.strip() == "error: rlexperiment or rlsweep 'cartpole-ppo' not found in namespace 'default'"
    assert kuberl(emulator, "delete", "cartpole-ppo").returncode == 2
    assert "No rlexperiments or rlsweeps found in namespace default" in kuberl(emulator, "list").stderr
    assert "No rlsweeps found in namespace default" in kuberl(emulator, "list", "sweeps").stderr


def test_namespaces_follow_the_flag_and_list_all_namespaces(emulator: Path, api: k8s.ApiClient) -> None:
    k8s.CoreV1Api(api).create_namespace({"metadata": {"name": "team-a"}})
    assert kuberl(emulator, "submit", "-f", str(EXAMPLE), "--set", "storage.uri=s3://bucket/runs", "-n", "team-a").returncode == 0
    assert kuberl(emulator, "submit", "-f", str(EXAMPLE), "--set", "storage.uri=s3://bucket/runs",
                  "--set", "metadata.name=other").returncode == 0
    assert [line.split()[0] for line in kuberl(emulator, "list", "experiments").stdout.splitlines()[1:]] == ["other"]
    assert [line.split()[0] for line in kuberl(emulator, "list", "rlx", "-n", "team-a").stdout.splitlines()[1:]] == \
        ["cartpole-ppo"]
    everywhere = kuberl(emulator, "list", "experiments", "-A").stdout.splitlines()
    assert [line.split()[:2] for line in everywhere[1:]] == [["default", "other"], ["team-a", "cartpole-ppo"]]
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["namespace"] = "team-a"
    mismatch = kuberl(emulator, "submit", "-f", "-", "-n", "team-b", "--set", "storage.uri=s3://bucket/runs",
                      stdin=yaml.safe_dump(manifest))
    assert mismatch.returncode == 2
    assert mismatch.stderr.strip() == "error: metadata.namespace: is 'team-a', but the command asks for namespace 'team-b'"


def test_the_python_client_submits_a_config_and_waits(emulator: Path, api: k8s.ApiClient) -> None:
    from kuberl.trainer.algorithms.ppo import PPOConfig

    client = Client(str(emulator))
    assert client.namespace == "default"
    config = (PPOConfig().environment("CartPole-v1").rollouts(workers=1).stopping(timesteps=5000)
              .named("from-python"))
    created = client.submit(config, overrides=["storage.uri=s3://bucket/runs"])
    assert created["metadata"]["uid"] and created["spec"]["algorithm"] == "ppo"
    with pytest.raises(AlreadyExists, match="'from-python' already exists in namespace 'default'"):
        client.submit(config, overrides=["storage.uri=s3://bucket/runs"])
    with pytest.raises(WaitTimeout, match="is still Pending after 0.5 s"):
        client.wait("from-python", timeout=0.5, interval=0.1)
    _set_status(api, "default", "from-python", {"phase": "Succeeded", "iteration": 3})
    seen: list[str] = []
    done = client.wait("from-python", timeout=30, on_change=lambda s: seen.append(s["phase"]))
    assert done["status"]["phase"] == "Succeeded" and seen == ["Succeeded"]
    assert client.status("from-python")["status"]["iteration"] == 3
    assert [o["metadata"]["name"] for o in client.list()] == ["from-python"]
    assert client.run_uri("from-python") == "s3://bucket/runs/default/from-python"
    client.delete("from-python", wait=30)
    with pytest.raises(NotFound, match="in namespace 'default'"):
        client.get("from-python")


def test_logs_fall_back_to_storage_and_outlive_the_experiment(emulator: Path, s3: S3Server, s3_bucket: str) -> None:
    """With no head pod (gone, or never made by an operator) `kuberl logs` reads the output the trainer
    left in the run's storage; with the experiment deleted too, from its storage URI or the run's."""
    storage = f"s3://{s3_bucket}/runs"
    assert kuberl(emulator, "submit", "-f", str(EXAMPLE), "--set", f"storage.uri={storage}",
                  "--set", f"storage.endpoint={s3.endpoint}").returncode == 0
    run = open_store(f"{storage}/default/cartpole-ppo", endpoint=s3.endpoint)
    for attempt, lines in ((1, 3), (2, 50)):  # what two trainers (attempts) wrote, in chunks of 256 bytes
        chunks = LogChunks(chunk_bytes=256, keep=100, flush_seconds=60)
        chunks.attach(run, attempt)
        for i in range(lines):
            chunks.write(f"attempt {attempt} iteration {i}\n".encode())
        assert chunks.close(30)

    env = s3.env()
    newest = kuberl(emulator, "logs", "cartpole-ppo", env=env)
    assert newest.returncode == 0, newest.stderr
    assert newest.stdout.splitlines() == [f"attempt 2 iteration {i}" for i in range(50)]
    assert "no head pod" in newest.stderr and "attempt 2" in newest.stderr and storage in newest.stderr
    first = kuberl(emulator, "logs", "cartpole-ppo", "--attempt", "1", "--tail", "2", env=env)
    assert first.stdout.splitlines() == ["attempt 1 iteration 1", "attempt 1 iteration 2"]

    assert kuberl(emulator, "delete", "cartpole-ppo", "--wait").returncode == 0
    missing = kuberl(emulator, "logs", "cartpole-ppo", env=env)
    assert missing.returncode == 2 and "--storage" in missing.stderr
    kept = kuberl(emulator, "logs", "cartpole-ppo", "--storage", storage, "--endpoint", s3.endpoint, "--tail", "1",
                  env=env)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == "attempt 2 iteration 49\n"
    direct = kuberl(emulator, "logs", f"{storage}/default/cartpole-ppo", "--endpoint", s3.endpoint, "--attempt", "1",
                    env=env)
    assert direct.stdout.splitlines() == [f"attempt 1 iteration {i}" for i in range(3)]


def test_the_dashboard_forwards_to_the_running_head_pod(emulator: Path, api: k8s.ApiClient) -> None:
    assert kuberl(emulator, "submit", "-f", str(EXAMPLE), "--set", "storage.uri=s3://bucket/runs").returncode == 0
    no_pod = kuberl(emulator, "dashboard", "cartpole-ppo", "--print")
    assert no_pod.returncode == 1 and "has no running head pod (none)" in no_pod.stderr
    core = k8s.CoreV1Api(api)
    core.create_namespaced_pod("default", {"metadata": {"name": "cartpole-ppo-head"},
                                           "spec": {"containers": [{"name": "head", "image": "x"}]}})
    core.patch_namespaced_pod_status("cartpole-ppo-head", "default", {"status": {"phase": "Running"}})
    shown = kuberl(emulator, "dashboard", "cartpole-ppo", "--print", "--port", "18265")
    assert shown.returncode == 0, shown.stderr
    command = shown.stdout.splitlines()[0].split()
    assert command[command.index("port-forward") + 1:] == ["pod/cartpole-ppo-head", "18265:8265", "--address",
                                                            "127.0.0.1"]
    assert command[command.index("-n") + 1] == "default"
    assert "http://127.0.0.1:18265" in shown.stdout and "cartpole-ppo-ray-token" in shown.stdout
    assert kuberl(emulator, "dashboard", "nothing", "--print").returncode == 2


def test_a_local_run_with_log_chunks_on_is_read_back_by_kuberl_logs(tmp_path: Path) -> None:
    """KUBERL_LOG_CHUNKS=1 tees a local `kuberl train` into its run directory, as in a pod; `kuberl logs`
    reads the run directory with no cluster at all."""
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "tiny"},
        "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "config": {"numEpochs": 1, "minibatchSize": 64},
                 "rollouts": {"workers": 0, "envsPerWorker": 2, "fragmentLength": 64}, "stop": {"timesteps": 384}}}))
    trained = subprocess.run([sys.executable, "-m", "kuberl.cli", "train", "-f", str(manifest), "--storage",
                              str(tmp_path / "runs")], capture_output=True, text=True, timeout=240,
                             env={**os.environ, "KUBERL_LOG_CHUNKS": "1", "OMP_NUM_THREADS": "1"})
    assert trained.returncode == 0, trained.stderr
    assert "training ppo on CartPole-v1" in trained.stdout  # the console keeps its output
    logs = kuberl(tmp_path / "no-kubeconfig", "logs", str(tmp_path / "runs" / "tiny"))
    assert logs.returncode == 0, logs.stderr
    assert "attempt 0" in logs.stderr
    # Every line the console got, stdout's and stderr's (merged as they came, so compared without order).
    assert sorted(logs.stdout.splitlines()) == sorted(trained.stdout.splitlines() + trained.stderr.splitlines())


def test_submit_creates_an_rlsweep_validated_as_a_sweep(emulator: Path, api: k8s.ApiClient) -> None:
    sweep_file = str(ROOT / "examples" / "sweeps" / "cartpole-lr.yaml")
    no_storage = kuberl(emulator, "submit", "-f", sweep_file)
    assert no_storage.returncode == 2 and "Traceback" not in no_storage.stderr
    assert "spec.template.storage.uri: required in a cluster" in no_storage.stderr
    bad_metric = kuberl(emulator, "submit", "-f", sweep_file, "--set", "template.storage.uri=s3://bucket/runs",
                      "--set", "objective.metric=learner.entropy")
    assert bad_metric.returncode == 2 and "spec.objective.metric: the operator reads trials' status" in bad_metric.stderr

    submitted = kuberl(emulator, "submit", "-f", sweep_file, "--set", "template.storage.uri=s3://bucket/runs",
                       "--set", "maxTrials=4")
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.strip() == "rlsweep.kuberl.io/cartpole-lr created in namespace default"
    created = k8s.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, "default", "rlsweeps",
                                                                      "cartpole-lr")
    assert created["spec"]["maxTrials"] == 4 and created["spec"]["template"]["storage"]["uri"] == "s3://bucket/runs"
    assert k8s.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []
    again = kuberl(emulator, "submit", "-f", sweep_file, "--set", "template.storage.uri=s3://bucket/runs")
    assert again.returncode == 2
    assert again.stderr.strip() == "error: rlsweep 'cartpole-lr' already exists in namespace 'default'"


SWEEP_FILE = str(ROOT / "examples" / "sweeps" / "cartpole-lr.yaml")
BEST = {"number": 1, "name": "cartpole-lr-t001", "params": {"config.lr": 0.0005, "config.entropyCoeff": 0.01},
        "value": 487.5}
TRIALS = [
    {"number": 0, "name": "cartpole-lr-t000", "state": "Pruned", "value": 120.0,
     "params": {"config.lr": 0.003, "config.entropyCoeff": 0.0}, "message": "stopped at 20000 steps"},
    {"number": 1, "name": "cartpole-lr-t001", "state": "Succeeded", "value": 487.5, "params": BEST["params"]},
    {"number": 2, "name": "cartpole-lr-t002", "state": "Running", "params": {"config.lr": 0.0001, "config.entropyCoeff": 0.0}},
]


def _trial_run(api: k8s.ApiClient, sweep: str, number: int, storage: str, endpoint: str | None = None) -> None:
    """A trial's RLExperiment as the operator creates it: labelled with the sweep's name and the trial's number."""
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"] = {"name": f"{sweep}-t{number:03d}", "labels": {
        "app.kubernetes.io/name": "kuberl", "kuberl.io/sweep": sweep, "kuberl.io/trial": str(number)}}
    manifest["spec"]["storage"] = {"uri": storage, **({"endpoint": endpoint} if endpoint else {})}
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, manifest)


def test_sweeps_are_listed_shown_and_deleted_beside_experiments(emulator: Path, api: k8s.ApiClient) -> None:
    storage = "template.storage.uri=s3://bucket/runs"
    assert kuberl(emulator, "submit", "-f", SWEEP_FILE, "--set", storage).returncode == 0
    assert kuberl(emulator, "submit", "-f", str(EXAMPLE), "--set", "storage.uri=s3://bucket/runs").returncode == 0
    _set_status(api, "default", "cartpole-lr", {"phase": "Running", "trialsSucceeded": 1, "trialsRunning": 1,
                                                "trialsPruned": 1, "trialsFailed": 0, "best": BEST, "trials": TRIALS},
                "rlsweeps")

    both = kuberl(emulator, "list")  # as kubectl get rlx,rls: a table per kind, names qualified by their kind
    assert both.returncode == 0, both.stderr
    experiments, sweeps = both.stdout.split("\n\n")
    assert experiments.splitlines()[1].split()[:3] == ["rlexperiment.kuberl.io/cartpole-ppo", "ppo", "CartPole-v1"]
    assert sweeps.splitlines()[0].split()[:3] == ["NAME", "PHASE", "SEARCH"]
    assert sweeps.splitlines()[1].split() == ["rlsweep.kuberl.io/cartpole-lr", "Running", "tpe", "1", "1", "1", "0",
                                              "487.5"] + sweeps.splitlines()[1].split()[8:]
    only = kuberl(emulator, "list", "sweeps", "-o", "wide").stdout.splitlines()
    assert len(only) == 2 and only[1].split()[0] == "cartpole-lr" and only[1].split()[-2:] == [
        "episodeReturnMean", "cartpole-lr-t001"]
    as_json = yaml.safe_load(kuberl(emulator, "list", "-o", "json").stdout)
    assert sorted((i["kind"], i["metadata"]["name"]) for i in as_json["items"]) == [
        ("RLExperiment", "cartpole-ppo"), ("RLSweep", "cartpole-lr")]

    status = kuberl(emulator, "status", "cartpole-lr")
    assert status.returncode == 0, status.stderr
    assert "Trials:      1 succeeded, 1 running, 1 pruned, 0 failed of 12" in status.stdout
    assert "Best:        cartpole-lr-t001 (trial 1): episodeReturnMean 487.5 with config.lr=0.0005" in status.stdout
    rows = status.stdout.split("All trials:\n")[1].splitlines()
    assert rows[1].split()[:4] == ["0", "cartpole-lr-t000", "Pruned", "120"] and "stopped at 20000" in rows[1]
    assert rows[2].split()[:4] == ["1*", "cartpole-lr-t001", "Succeeded", "487.5"]
    document = yaml.safe_load(kuberl(emulator, "status", "rls/cartpole-lr", "-o", "yaml").stdout)
    assert document["kind"] == "RLSweep" and [t["state"] for t in document["status"]["trials"]] == [
        "Pruned", "Succeeded", "Running"]

    # A sweep's output is its trials': asked for without a trial, it says how.
    no_trial = kuberl(emulator, "logs", "cartpole-lr")
    assert no_trial.returncode == 2 and "Traceback" not in no_trial.stderr
    assert "trials 0-2, the best so far 1" in no_trial.stderr and "--trial N" in no_trial.stderr
    not_run = kuberl(emulator, "logs", "sweep/cartpole-lr", "--trial", "7")
    assert not_run.returncode == 2 and "no run of trial 7" in not_run.stderr
    wrong = kuberl(emulator, "logs", "cartpole-ppo", "--trial", "1")
    assert wrong.returncode == 2 and "--trial" in wrong.stderr

    # The same name on both kinds: a bare name is refused, a kind-qualified one is not.
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = "cartpole-lr"
    assert kuberl(emulator, "submit", "-f", "-", "--set", "storage.uri=s3://bucket/runs",
                  stdin=yaml.safe_dump(manifest)).returncode == 0
    ambiguous = kuberl(emulator, "status", "cartpole-lr")
    assert ambiguous.returncode == 2 and "Traceback" not in ambiguous.stderr
    assert "sweep/cartpole-lr" in ambiguous.stderr and "experiment/cartpole-lr" in ambiguous.stderr
    assert kuberl(emulator, "delete", "cartpole-lr").returncode == 2  # nothing deleted on a guess
    assert "Algorithm:   ppo on CartPole-v1" in kuberl(emulator, "status", "experiment/cartpole-lr").stdout
    assert "Kind:        RLSweep" in kuberl(emulator, "status", "sweep/cartpole-lr").stdout

    deleted = kuberl(emulator, "delete", "sweep/cartpole-lr", "--wait")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [
        "rlsweep.kuberl.io/cartpole-lr deleted from namespace default",
        "its trials go with it; their storage stays under s3://bucket/runs (kuberl logs TRIAL --storage "
        "s3://bucket/runs)"]
    assert [line.split()[0] for line in kuberl(emulator, "list").stdout.splitlines()[1:]] == [
        "rlexperiment.kuberl.io/cartpole-lr", "rlexperiment.kuberl.io/cartpole-ppo"]
    assert "Algorithm:   ppo" in kuberl(emulator, "status", "cartpole-lr").stdout  # no longer ambiguous


def _sweep_ends(api: k8s.ApiClient, name: str, status: dict) -> threading.Thread:
    """In the background, as an operator would: once the sweep exists, it runs, then ends with `status`."""
    custom = k8s.CustomObjectsApi(api)

    def run() -> None:
        for _ in range(600):
            if any(o["metadata"]["name"] == name for o in
                   custom.list_namespaced_custom_object(GROUP, VERSION, "default", "rlsweeps")["items"]):
                break
            threading.Event().wait(0.05)
        _set_status(api, "default", name, {"phase": "Running", "trialsRunning": 2}, "rlsweeps")
        threading.Event().wait(2.5)  # at least one poll of the waiting command sees it run
        _set_status(api, "default", name, status, "rlsweeps")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_submit_wait_follows_a_sweep_to_its_end(emulator: Path, api: k8s.ApiClient) -> None:
    ended = _sweep_ends(api, "cartpole-lr", {"phase": "Succeeded", "trialsSucceeded": 2, "best": BEST,
                                             "message": "maxTrials reached: 2 trials"})
    followed = kuberl(emulator, "submit", "-f", SWEEP_FILE, "--set", "template.storage.uri=s3://bucket/runs",
                      "--set", "maxTrials=2", "--wait", "--timeout", "120")
    ended.join(30)
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert lines[0] == "rlsweep.kuberl.io/cartpole-lr created in namespace default"
    assert "cartpole-lr: Running, trials 0 succeeded, 2 running, 0 pruned, 0 failed" in lines
    assert lines[-2:] == [
        "cartpole-lr: best trial cartpole-lr-t001 (trial 1): episodeReturnMean 487.5 with config.lr=0.0005, "
        "config.entropyCoeff=0.01",
        "cartpole-lr: maxTrials reached: 2 trials"]

    failing = _sweep_ends(api, "failing", {"phase": "Failed", "trialsFailed": 3,
                                           "message": "3 trials failed, more than maxFailedTrials (2)"})
    failed = kuberl(emulator, "submit", "-f", SWEEP_FILE, "--set", "template.storage.uri=s3://bucket/runs",
                    "--set", "metadata.name=failing", "--wait", "--timeout", "120")
    failing.join(30)
    assert failed.returncode == 1, failed.stderr
    assert failed.stdout.splitlines()[-2:] == ["failing: best trial none yet",
                                               "failing: 3 trials failed, more than maxFailedTrials (2)"]


def test_the_python_client_has_the_sweep_verbs(emulator: Path, api: k8s.ApiClient, s3: S3Server,
                                               s3_bucket: str) -> None:
    client = Client(str(emulator))
    created = client.submit(SWEEP_FILE, overrides=["template.storage.uri=s3://bucket/runs"])
    assert created["kind"] == "RLSweep"
    assert [o["metadata"]["name"] for o in client.list_sweeps()] == ["cartpole-lr"] and client.list() == []
    assert client.get_sweep("cartpole-lr")["spec"]["maxTrials"] == 12
    with pytest.raises(WaitTimeout, match="rlsweep 'cartpole-lr' in namespace 'default' is still Pending after 0.5 s"):
        client.wait_sweep("cartpole-lr", timeout=0.5, interval=0.1)
    _set_status(api, "default", "cartpole-lr", {"phase": "Succeeded", "trialsSucceeded": 2, "best": BEST,
                                                "trials": TRIALS[:2]}, "rlsweeps")
    assert client.wait_sweep("cartpole-lr", timeout=30)["status"]["best"]["name"] == "cartpole-lr-t001"
    assert client.sweep_status("cartpole-lr")["status"]["trialsSucceeded"] == 2

    # A trial's output: its run's, read from storage here (no operator, so no pods).
    storage = f"s3://{s3_bucket}/runs"
    for number in (0, 1):
        _trial_run(api, "cartpole-lr", number, storage, s3.endpoint)
        chunks = LogChunks(chunk_bytes=256, keep=10, flush_seconds=60)
        chunks.attach(open_store(f"{storage}/default/cartpole-lr-t{number:03d}", endpoint=s3.endpoint), 1)
        chunks.write(f"trial {number} trains\n".encode())
        assert chunks.close(30)
    assert [o["metadata"]["name"] for o in client.sweep_trials("cartpole-lr")] == ["cartpole-lr-t000",
                                                                                  "cartpole-lr-t001"]
    assert [o["metadata"]["name"] for o in client.sweep_trials("cartpole-lr", trial=1)] == ["cartpole-lr-t001"]
    logs = kuberl(emulator, "logs", "sweep/cartpole-lr", "--trial", "1", env=s3.env())
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "trial 1 trains\n" and "trial 1 of rlsweep 'cartpole-lr': run cartpole-lr-t001" in logs.stderr

    client.delete_sweep("cartpole-lr", wait=30)
    with pytest.raises(NotFound, match="rlsweep 'cartpole-lr' not found in namespace 'default'"):
        client.get_sweep("cartpole-lr")


def test_a_kind_that_rbac_hides_is_left_out_not_fatal(tmp_path: Path) -> None:
    """A user whose role grants rlexperiments but not rlsweeps lists, shows and deletes their experiments as
    before; only when both kinds are refused is it an error."""
    with EmulatorThread() as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        assert kuberl(kubeconfig, "submit", "-f", str(EXAMPLE), "--set", "storage.uri=s3://bucket/runs").returncode == 0
        server.call(server.emulator.inject_fault, "GET", r"/rlsweeps", 403, times=1000)
        listed = kuberl(kubeconfig, "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[1].split()[0] == "rlexperiment.kuberl.io/cartpole-ppo"
        assert listed.stderr.startswith("warning: rlsweeps in namespace 'default': forbidden")
        assert kuberl(kubeconfig, "list", "sweeps").returncode == 1  # asked for alone: the refusal is the answer
        assert "Algorithm:   ppo" in kuberl(kubeconfig, "status", "cartpole-ppo").stdout
        assert kuberl(kubeconfig, "status", "nothing").returncode == 1  # it may be a sweep that RBAC hides
        server.call(server.emulator.inject_fault, "GET", r"/rlexperiments", 403, times=1000)
        refused = kuberl(kubeconfig, "list")
        assert refused.returncode == 1 and refused.stderr.startswith("error: rlexperiments in namespace 'default': "
                                                                     "forbidden")
