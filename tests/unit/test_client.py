"""kuberl.client's pure parts: kubeconfig resolution as kubectl does it, what submit sends, the table and
the status it prints, the dashboard's port-forward, and the CLI's answers that need no cluster."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kuberl.api.field_errors import ManifestError
from kuberl.client.connection import connect, context_namespace, kubeconfig_paths
from kuberl.client.dashboard import port_forward
from kuberl.client.errors import ConfigError, from_api_error
from kuberl.client.formatting import (
    age,
    describe,
    describe_sweep,
    experiments_table,
    recent_events,
    resource_table,
    status_document,
    sweep_progress_line,
    sweep_status_document,
    sweeps_table,
)
from kuberl.client.kinds import EXPERIMENT, SWEEP, kind_named, parse_reference
from kuberl.client.logs import is_run_location, pod_started, tail_lines
from kuberl.client.manifests import prepare
from kuberl.client.runs import run_uri
from kuberl.trainer.run.settings import TrainerSettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole-ppo.yaml"
NOW = datetime.datetime(2026, 11, 26, 12, 0, 0, tzinfo=datetime.UTC)
S3 = ["storage.uri=s3://bucket/runs"]


def _kubeconfig(path: Path, contexts: dict[str, str | None], current: str | None, port: int = 1) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", **({"current-context": current} if current else {}),
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
                     for name, ns in contexts.items()],
    }))
    return path


# -- which cluster, which namespace --------------------------------------------------------------------

def test_kubeconfig_paths_follow_kubectl() -> None:
    assert kubeconfig_paths("/x/config", {"KUBECONFIG": "/a:/b"}) == ["/x/config"]
    assert kubeconfig_paths(None, {"KUBECONFIG": "/a::/b"}) == ["/a", "/b"]
    assert kubeconfig_paths(None, {}) == ["~/.kube/config"]


def test_namespace_is_the_flag_then_the_context_then_default(tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path / "config", {"lab": "research", "bare": None}, current="lab")
    env = {"KUBECONFIG": str(config)}
    assert connect(env=env).namespace == "research"
    assert connect(env=env).context == "lab"
    assert connect(namespace="other", env=env).namespace == "other"
    assert connect(namespace="other", env=env).namespace_given
    assert connect(context="bare", env=env).namespace == "default"
    assert connect(str(config), env={}).server == "http://127.0.0.1:1"


def test_kubeconfig_files_in_kubeconfig_are_merged(tmp_path: Path) -> None:
    first = _kubeconfig(tmp_path / "a", {"lab": "research"}, current="lab", port=1)
    second = _kubeconfig(tmp_path / "b", {"prod": "team"}, current=None, port=2)
    env = {"KUBECONFIG": f"{first}:{second}"}
    assert connect(context="prod", env=env).namespace == "team"
    assert connect(env=env).context == "lab"
    third = _kubeconfig(tmp_path / "c", {"lab": "elsewhere"}, current="prod")
    env = {"KUBECONFIG": f"{first}:{third}"}
    assert (connect(env=env).context, connect(env=env).namespace) == ("lab", "research")  # the first file wins


def test_a_missing_kubeconfig_or_context_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        connect(str(tmp_path / "nope"), env={})
    with pytest.raises(ConfigError, match="not found"):
        connect(env={"KUBECONFIG": str(tmp_path / "nope")})
    config = _kubeconfig(tmp_path / "config", {"lab": "research"}, current="lab")
    with pytest.raises(ConfigError, match="context 'prod' is not in the kubeconfig.*lab"):
        connect(context="prod", env={"KUBECONFIG": str(config)})
    with pytest.raises(ConfigError, match="context 'x'"):
        context_namespace([], "x")


def test_api_errors_name_the_experiment_and_namespace() -> None:
    class Refused(Exception):
        def __init__(self, status: int, message: str = "") -> None:
            self.status, self.reason = status, "reason"
            self.body = json.dumps({"message": message}) if message else None

    assert str(from_api_error(Refused(404), "rlexperiment 'x'", "research")) == \
        "rlexperiment 'x' not found in namespace 'research'"
    assert from_api_error(Refused(404), "x", "ns").exit_code == 2
    assert "already exists in namespace 'ns'" in str(from_api_error(Refused(409), "rlexperiment 'x'", "ns"))
    forbidden = from_api_error(Refused(403, 'user "bob" cannot create'), "rlexperiment 'x'", "ns")
    assert "forbidden" in str(forbidden) and 'user "bob"' in str(forbidden) and forbidden.exit_code == 1
    assert "cannot reach" in str(from_api_error(ConnectionRefusedError("refused"), "x", "ns"))


# -- what submit sends -----------------------------------------------------------------------------------

def test_submit_sends_the_written_manifest_with_overrides_not_the_defaults() -> None:
    doc, experiment = prepare(EXAMPLE, S3 + ["rollouts.workers=2"], namespace="research", namespace_given=False)
    assert doc["metadata"] == {"name": "cartpole-ppo", "namespace": "research"}
    assert doc["spec"]["rollouts"]["workers"] == 2 and doc["spec"]["storage"] == {"uri": "s3://bucket/runs"}
    assert "workers" not in doc["spec"] or "replicas" not in doc["spec"].get("workers", {})  # left to the operator
    assert experiment.spec.rollouts.workers == 2


def test_submit_of_an_rlexperiment_sends_only_what_it_sets() -> None:
    """Fields the object leaves unset stay the operator's to default (its head and worker sizes) and the
    trainer's (the task-kind defaults of rollouts and replay): a dump of every default would pass for the
    user's."""
    from kuberl.api.defaults import resolved_defaults
    from kuberl.api.validation import load_manifest, validate_document

    text = ("apiVersion: kuberl.io/v1alpha1\nkind: RLExperiment\nmetadata: {name: sac-pendulum}\n"
            "spec: {algorithm: sac, env: {id: Pendulum-v1}, stop: {timesteps: 20000}}\n")
    experiment = load_manifest(text, overrides=S3)
    experiment.spec.workers.replicas = 1  # set by assignment, on a model the manifest left out
    doc, _ = prepare(experiment, [], namespace="research", namespace_given=False)
    assert (doc["apiVersion"], doc["kind"]) == ("kuberl.io/v1alpha1", "RLExperiment")
    assert doc["spec"]["workers"] == {"replicas": 1} and "head" not in doc["spec"]
    assert "replay" not in doc["spec"]
    stored = validate_document(doc)  # as the operator reads it back
    sizes = stored.spec.head.model_fields_set | stored.spec.workers.model_fields_set
    assert {"cpu", "memory"}.isdisjoint(sizes)
    alone = resolved_defaults(experiment, "continuous-vector")[1]
    assert resolved_defaults(stored, "continuous-vector")[1] == alone
    assert alone["replay.capacity"] == 1_000_000


def test_submit_refuses_what_a_cluster_cannot_run_naming_the_field() -> None:
    with pytest.raises(ManifestError) as caught:
        prepare(EXAMPLE, [], namespace="research", namespace_given=False)
    assert [e.path for e in caught.value.errors] == ["spec.storage.uri"]
    with pytest.raises(ManifestError) as caught:
        prepare(EXAMPLE, S3 + ["rolouts.workers=2"], namespace="research", namespace_given=False)
    assert "spec.rolouts" in str(caught.value) and "rollouts" in str(caught.value)


def test_a_manifest_namespace_must_agree_with_an_explicit_one() -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["namespace"] = "team-a"
    doc, _ = prepare(manifest, S3, namespace="default", namespace_given=False)
    assert doc["metadata"]["namespace"] == "team-a"
    with pytest.raises(ManifestError, match="metadata.namespace: is 'team-a'"):
        prepare(manifest, S3, namespace="team-b", namespace_given=True)


def test_submit_takes_an_algorithm_config() -> None:
    from kuberl.trainer.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("CartPole-v1").rollouts(workers=1).stopping(timesteps=10_000)
              .named("from-python"))
    doc, experiment = prepare(config, S3, namespace="research", namespace_given=False)
    assert doc["metadata"]["name"] == "from-python" and experiment.spec.algorithm == "ppo"
    with pytest.raises(ManifestError, match="spec.stop"):  # a cluster run needs a stop criterion
        prepare(PPOConfig().environment("CartPole-v1").named("x"), S3, namespace="ns", namespace_given=False)


def test_the_run_uri_is_storage_namespace_name() -> None:
    obj = {"metadata": {"name": "x", "namespace": "research"}, "spec": {"storage": {"uri": "s3://b/runs/"}}}
    assert run_uri(obj) == "s3://b/runs/research/x"
    assert run_uri({"metadata": {"name": "x", "namespace": "ns"}, "spec": {}}, "s3://b/p") == "s3://b/p/ns/x"
    with pytest.raises(ManifestError, match="spec.storage.uri"):
        run_uri({"metadata": {"name": "x"}, "spec": {}})


# -- what list and status print ---------------------------------------------------------------------------

def _experiment(name: str, ns: str = "research", **status: object) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-11-26T11:48:00Z"},
            "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}}, "status": status}


def test_ages_read_like_kubectl() -> None:
    def ago(seconds: int) -> str:
        return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    assert [age(ago(s), NOW) for s in (5, 119, 190, 720, 4 * 3600 + 120, 20 * 3600, 3 * 86400 + 7200, 40 * 86400)] == \
        ["5s", "119s", "3m10s", "12m", "4h2m", "20h", "3d2h", "40d"]
    assert age(None, NOW) == "<unknown>"


def test_the_list_has_the_crd_printer_columns() -> None:
    items = [_experiment("b", phase="Running", iteration=40, timesteps=512000, episodeReturnMean=312.5),
             _experiment("a", ns="other", phase="Pending")]
    lines = experiments_table(items, NOW, all_namespaces=True).splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "PHASE", "ALGORITHM", "ENV", "ITERATION", "TIMESTEPS",
                                "RETURN", "EVAL", "AGE"]
    assert lines[1].split() == ["other", "a", "Pending", "ppo", "CartPole-v1", "12m"]
    assert lines[2].split() == ["research", "b", "Running", "ppo", "CartPole-v1", "40", "512000", "312.5", "12m"]
    wide = experiments_table(items, NOW, wide=True).splitlines()[0].split()
    assert wide[0] == "NAME" and wide[-1] == "CHECKPOINT"


def test_status_shows_phase_progress_checkpoint_conditions_and_events() -> None:
    obj = _experiment("x", phase="Running", attempt=2, iteration=40, timesteps=512000, episodeReturnMean=312.5,
                      lastCheckpoint="s3://b/runs/research/x/checkpoints/000040", message="training",
                      conditions=[{"type": "Ready", "status": "True", "reason": "Running",
                                   "lastTransitionTime": "2026-11-26T11:58:00Z", "message": "training"}],
                      lastFailure={"attempt": 1, "reason": "OOMKilled", "message": "the head ran out of memory"})
    events = [{"type": "Normal", "reason": f"R{i}", "message": f"event {i}", "count": 1,
               "lastTimestamp": f"2026-11-26T11:{i:02d}:00Z"} for i in range(30)]
    text = describe(obj, events, NOW)
    assert "Phase:       Running (attempt 2)" in text
    assert "iteration 40, 512,000 timesteps, return 312.5" in text
    assert "s3://b/runs/research/x/checkpoints/000040" in text
    assert "attempt 1: OOMKilled" in text
    assert "Ready" in text and "2m" in text
    assert "event 29" in text and "event 9" not in text  # the newest 20
    document = status_document(obj, events)
    assert document["status"]["phase"] == "Running" and len(document["events"]) == 20
    assert [e["reason"] for e in recent_events(list(reversed(events)), 2)] == ["R28", "R29"]


def test_status_of_a_new_experiment_says_so() -> None:
    text = describe(_experiment("x"), [], NOW)
    assert "Phase:       Pending" in text and "Progress:    none yet" in text and "Events:      none" in text


# -- sweeps -----------------------------------------------------------------------------------------------

def _sweep(name: str, **status: object) -> dict:
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep",
            "metadata": {"name": name, "namespace": "research", "creationTimestamp": "2026-11-26T11:48:00Z"},
            "spec": {"template": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}},
                     "parameters": [{"path": "config.lr", "type": "float"}, {"path": "config.gamma", "type": "float"}],
                     "objective": {"metric": "episodeReturnMean"}, "search": {"algorithm": "random"}, "maxTrials": 3},
            "status": status}


SWEEP_STATUS = {
    "phase": "Running", "trialsSucceeded": 1, "trialsRunning": 1, "trialsFailed": 1,
    "best": {"number": 0, "name": "lr-t000", "params": {"config.lr": 0.0003, "config.gamma": 0.99}, "value": 312.5},
    "trials": [
        {"number": 0, "name": "lr-t000", "state": "Succeeded", "value": 312.5,
         "params": {"config.lr": 0.0003, "config.gamma": 0.99}},
        {"number": 1, "name": "lr-t001", "state": "Failed", "params": {"config.lr": 0.05, "config.gamma": 0.9},
         "message": "the trainer exited 1"},
        {"number": 2, "name": "lr-t002", "state": "Running", "params": {"config.lr": 0.001, "config.gamma": 0.95}},
    ]}


def test_kinds_are_named_as_kubectl_names_them() -> None:
    assert [kind_named(w) for w in ("rls", "RLSweep", "sweeps", "rlsweeps.kuberl.io", "rlx", "experiment")] == \
        [SWEEP, SWEEP, SWEEP, SWEEP, EXPERIMENT, EXPERIMENT]
    assert kind_named("pods") is None
    assert parse_reference("sweep/lr") == (SWEEP, "lr")
    assert parse_reference("rlexperiment.kuberl.io/cartpole") == (EXPERIMENT, "cartpole")
    assert parse_reference("lr") == (None, "lr")
    assert parse_reference("runs/lr") == (None, "runs/lr")  # a directory, not a kind
    assert parse_reference("sweep/a/b") == (None, "sweep/a/b")


def test_the_sweep_list_has_the_rlsweep_printer_columns_and_names_can_carry_their_kind() -> None:
    lines = sweeps_table([_sweep("lr", **SWEEP_STATUS)], NOW).splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "SEARCH", "DONE", "RUNNING", "PRUNED", "FAILED", "BEST", "AGE"]
    assert lines[1].split() == ["lr", "Running", "random", "1", "1", "1", "312.5", "12m"]
    qualified = resource_table([_sweep("lr")], NOW, kind="RLSweep", prefix="rlsweep.kuberl.io/").splitlines()
    assert qualified[1].split()[0] == "rlsweep.kuberl.io/lr"


def test_sweep_status_shows_the_trials_and_the_best_trial() -> None:
    text = describe_sweep(_sweep("lr", **SWEEP_STATUS), [], NOW)
    assert "Kind:        RLSweep (random search over ppo on CartPole-v1)" in text
    assert "Trials:      1 succeeded, 1 running, 0 pruned, 1 failed of 3" in text
    assert "Best:        lr-t000 (trial 0): episodeReturnMean 312.5 with config.lr=0.0003, config.gamma=0.99" in text
    rows = text.split("All trials:\n")[1].split("Conditions:")[0].splitlines()
    assert rows[0].split() == ["TRIAL", "NAME", "STATE", "VALUE", "config.lr", "config.gamma", "MESSAGE"]
    assert rows[1].split() == ["0*", "lr-t000", "Succeeded", "312.5", "0.0003", "0.99"]  # * the best
    assert rows[2].split() == ["1", "lr-t001", "Failed", "0.05", "0.9", "the", "trainer", "exited", "1"]
    assert rows[3].split() == ["2", "lr-t002", "Running", "0.001", "0.95"]
    document = sweep_status_document(_sweep("lr", **SWEEP_STATUS), [])
    assert document["kind"] == "RLSweep" and document["status"]["best"]["name"] == "lr-t000"
    assert document["parameters"] == ["config.lr", "config.gamma"] and document["search"] == "random"
    fresh = describe_sweep(_sweep("new"), [], NOW)
    assert "Phase:       Pending" in fresh and "Best:        none yet" in fresh and "All trials:  none yet" in fresh
    assert sweep_progress_line("lr", SWEEP_STATUS, "episodeReturnMean") == \
        "lr: Running, trials 1 succeeded, 1 running, 0 pruned, 1 failed, best 312.5 (lr-t000)"


# -- logs and dashboard ---------------------------------------------------------------------------------

def test_log_helpers() -> None:
    assert tail_lines("a\nb\nc\n", 2) == "b\nc\n" and tail_lines("a\n", None) == "a\n" and tail_lines("a", 0) == ""
    assert is_run_location("s3://b/runs/ns/x") and is_run_location("./kuberl-runs/x") and not is_run_location("x")
    assert pod_started({"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}})
    assert not pod_started({"status": {"containerStatuses": [{"state": {"waiting": {}}}]}})


def test_the_dashboard_forwards_the_head_pods_port_on_loopback() -> None:
    forward = port_forward("cartpole", "research", context="lab", kubeconfig="/k")
    assert forward.command == ["kubectl", "--kubeconfig", "/k", "--context", "lab", "-n", "research", "port-forward",
                               "pod/cartpole-head", "8265:8265", "--address", "127.0.0.1"]
    assert forward.url == "http://127.0.0.1:8265"
    assert "get secret cartpole-ray-token" in forward.token_command and "{.data.token}" in forward.token_command
    assert port_forward("x", "ns", local_port=9000).url == "http://127.0.0.1:9000"


def test_log_chunks_are_on_in_a_cluster_and_off_locally_unless_asked() -> None:
    assert TrainerSettings.from_env({}, in_cluster=True).log_chunks
    assert not TrainerSettings.from_env({}).log_chunks
    assert TrainerSettings.from_env({"KUBERL_LOG_CHUNKS": "1"}).log_chunks
    assert not TrainerSettings.from_env({"KUBERL_LOG_CHUNKS": "0"}, in_cluster=True).log_chunks
    assert TrainerSettings.from_env({"KUBERL_LOG_CHUNK_BYTES": "4096", "KUBERL_LOG_KEEP_CHUNKS": "3"}).log_keep_chunks == 3


# -- the CLI where no cluster is needed ------------------------------------------------------------------

def _kuberl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_submit_dry_run_prints_what_would_be_created() -> None:
    result = _kuberl("submit", "-f", str(EXAMPLE), "--set", S3[0], "-n", "research", "--dry-run")
    assert result.returncode == 0, result.stderr
    doc = yaml.safe_load(result.stdout)
    assert doc["metadata"]["namespace"] == "research" and doc["spec"]["storage"]["uri"] == "s3://bucket/runs"


def test_an_invalid_manifest_is_exit_2_naming_the_field_without_a_traceback(tmp_path: Path) -> None:
    result = _kuberl("submit", "-f", str(EXAMPLE), "--set", "rollouts.workers=-1", "--set", S3[0],
                     env={"KUBECONFIG": str(tmp_path / "none")})
    assert result.returncode == 2
    assert "spec.rollouts.workers" in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_cluster_is_one_line_and_exit_1(tmp_path: Path) -> None:
    from kuberl_testing.ports import free_port

    config = _kubeconfig(tmp_path / "config", {"lab": "research"}, current="lab", port=free_port("127.0.0.1"))
    result = _kuberl("list", env={"KUBECONFIG": str(config)})
    assert result.returncode == 1, result
    assert result.stderr.startswith("error: cannot reach the Kubernetes API server")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_no_kubeconfig_is_exit_2(tmp_path: Path) -> None:
    result = _kuberl("status", "x", env={"KUBECONFIG": str(tmp_path / "none"), "KUBERNETES_SERVICE_HOST": ""})
    assert result.returncode == 2 and "no kubeconfig" in result.stderr and "Traceback" not in result.stderr


def test_the_client_imports_neither_torch_nor_ray() -> None:
    code = ("import sys, kuberl.client, kuberl.client.logs, kuberl.client.dashboard, kuberl.commands.cluster; "
            "print(sorted(m for m in ('torch', 'ray', 'gymnasium', 'kopf') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


def test_submit_of_an_algorithm_config_leaves_the_pod_sizes_to_the_operator() -> None:
    """An AlgorithmConfig read from a manifest sends what the manifest set, not every default of the API types:
    the operator's head and worker sizes still apply."""
    from kuberl.api.validation import load_manifest
    from kuberl.trainer.algorithms.config import AlgorithmConfig

    text = ("apiVersion: kuberl.io/v1alpha1\nkind: RLExperiment\nmetadata: {name: ppo}\n"
            "spec: {algorithm: ppo, env: {id: CartPole-v1}, stop: {timesteps: 20000}, workers: {replicas: 1}}\n")
    config = AlgorithmConfig.from_experiment(load_manifest(text, overrides=S3))
    doc, _ = prepare(config, [], namespace="research", namespace_given=False)
    assert doc["spec"]["workers"] == {"replicas": 1} and "head" not in doc["spec"]
