"""Builders: field-by-field checks of every child body, names, security and GPU handling."""

from __future__ import annotations

import base64
import re

import pytest
import yaml

from kuberl.api.defaults import SET_FIELDS_ANNOTATION, user_set_paths
from kuberl.api.validation import validate_document
from kuberl.operator import names
from kuberl.operator.builders import (
    Owner,
    build_config_map,
    build_head_pod,
    build_head_service,
    build_network_policy,
    build_token_secret,
    build_worker_pod,
    new_token,
    resolve_experiment,
)
from kuberl.operator.builders.pod import ray_cpus
from kuberl.operator.settings import Settings, SettingsError

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
SETTINGS = Settings(trainer_image="registry.example/trainer:1", operator_namespace="kuberl-system",
                    prometheus_namespace="monitoring")
PORT = SETTINGS.status_port


def experiment(name: str = "cartpole", **spec: object):
    base = {
        "algorithm": "ppo",
        "env": {"id": "CartPole-v1"},
        "stop": {"timesteps": 1000},
        "storage": {"uri": "s3://bucket/runs", "secretRef": {"name": "s3-creds"}},
        "workers": {"replicas": 2},
    }
    base.update(spec)
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": name}, "spec": base}
    return resolve_experiment(validate_document(doc), SETTINGS, "research")


def owner(name: str = "cartpole") -> Owner:
    return Owner(name, "research", "uid-123")


def env_of(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


def test_common_metadata_labels_and_owner_reference():
    for body in (build_config_map(experiment(), owner()), build_head_service(owner(), status_port=PORT),
                 build_head_pod(experiment(), owner(), 1, status_port=PORT),
                 build_worker_pod(experiment(), owner(), 0, 1, status_port=PORT),
                 build_token_secret(owner(), "t"), build_network_policy(owner(), operator_namespace="o",
                                                                        prometheus_namespace="p", status_port=PORT)):
        meta = body["metadata"]
        assert meta["namespace"] == "research"
        assert meta["labels"]["app.kubernetes.io/name"] == "kuberl"
        assert meta["labels"]["kuberl.io/experiment"] == "cartpole"
        assert meta["ownerReferences"] == [{"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                            "name": "cartpole", "uid": "uid-123", "controller": True,
                                            "blockOwnerDeletion": True}]


def test_names_for_a_plain_experiment():
    assert names.head_name("cartpole") == "cartpole-head"
    assert names.worker_name("cartpole", 3) == "cartpole-worker-3"
    assert names.config_map_name("cartpole") == "cartpole-config"
    assert names.token_secret_name("cartpole") == "cartpole-ray-token"


@pytest.mark.parametrize("name", ["a" * 60, "1-starts-with-digit", "dotted.name.v2", "x" * 253, "9"])
def test_awkward_experiment_names_still_give_valid_child_names(name):
    children = [names.head_name(name), names.worker_name(name, 999), names.config_map_name(name),
                names.token_secret_name(name), names.network_policy_name(name)]
    for child in children:
        assert DNS1035.match(child), child
        assert len(child) <= 63, child
    label = names.experiment_label(name)
    assert LABEL_VALUE.match(label) and len(label) <= 63
    assert names.head_name(name) == names.head_name(name)  # deterministic


def test_shortened_names_differ_for_names_sharing_a_prefix():
    a, b = "a" * 60 + "x", "a" * 60 + "y"
    assert names.head_name(a) != names.head_name(b)
    assert names.experiment_label("b" * 70 + "1") != names.experiment_label("b" * 70 + "2")


def test_config_map_holds_the_resolved_spec_with_name_and_namespace():
    body = build_config_map(experiment(), owner())
    assert body["metadata"]["name"] == "cartpole-config"
    doc = yaml.safe_load(body["data"]["experiment.yaml"])
    assert doc["metadata"] == {"name": "cartpole", "namespace": "research", "annotations": {SET_FIELDS_ANNOTATION: ""}}
    assert doc["spec"]["image"] == "registry.example/trainer:1"
    assert doc["spec"]["head"]["cpu"] == "2" and doc["spec"]["workers"]["memory"] == "8Gi"
    assert validate_document(doc).spec.workers.replicas == 2  # the trainer can load it


def test_config_map_says_which_rollouts_and_replay_fields_the_manifest_set():
    # experiment.yaml holds every default; the annotation keeps the task-kind defaults from taking them for the user's
    body = build_config_map(experiment(algorithm="dqn", rollouts={"workers": 2, "fragmentLength": 32},
                                       replay={"capacity": 5000}), owner())
    doc = yaml.safe_load(body["data"]["experiment.yaml"])
    assert doc["spec"]["rollouts"]["envsPerWorker"] == 8  # written out, but not the user's
    assert doc["metadata"]["annotations"][SET_FIELDS_ANNOTATION] == (
        "replay.capacity,rollouts.fragmentLength,rollouts.workers")
    in_pod = validate_document(doc)
    assert user_set_paths(in_pod) == {"replay.capacity", "rollouts.fragmentLength", "rollouts.workers"}


def test_resolve_uses_operator_defaults_only_for_unset_resources():
    settings = Settings(default_head_cpu="3", default_worker_memory="2Gi")
    doc = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "e"},
           "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 1},
                    "image": "mine:2", "head": {"memory": "1Gi"}, "workers": {"cpu": "1"}}}
    resolved = resolve_experiment(validate_document(doc), settings, "ns")
    assert resolved.spec.head.cpu == "3" and resolved.spec.head.memory == "1Gi"
    assert resolved.spec.workers.cpu == "1" and resolved.spec.workers.memory == "2Gi"
    assert resolved.spec.image == "mine:2"
    assert resolved.metadata.namespace == "ns"


def test_head_service_ports_and_selector():
    body = build_head_service(owner(), status_port=PORT)
    assert body["metadata"]["name"] == "cartpole-head"
    assert body["spec"]["type"] == "ClusterIP"
    assert {p["name"]: p["port"] for p in body["spec"]["ports"]} == {
        "gcs": 6379, "client": 10001, "dashboard": 8265, "status": 8080}
    assert body["spec"]["selector"] == {"app.kubernetes.io/name": "kuberl", "kuberl.io/experiment": "cartpole",
                                        "kuberl.io/role": "head"}


def test_head_pod_command_env_and_mounts():
    pod = build_head_pod(experiment(), owner(), 4, status_port=PORT)
    assert pod["metadata"]["name"] == "cartpole-head"
    assert pod["metadata"]["labels"]["kuberl.io/role"] == "head"
    assert pod["metadata"]["annotations"]["kuberl.io/attempt"] == "4"
    container = pod["spec"]["containers"][0]
    script = container["command"][2]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert "ray start --head --node-ip-address=${POD_IP} --port=6379" in script
    assert script.endswith("kuberl train --in-cluster -f /etc/kuberl/experiment.yaml")
    env = env_of(pod)
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["RAY_ADDRESS"]["value"] == "$(POD_IP):6379"
    assert env["KUBERL_ATTEMPT"]["value"] == "4"
    assert env["KUBERL_EXPECTED_NODES"]["value"] == "3"
    assert env["KUBERL_EXPERIMENT_NAME"]["value"] == "cartpole"
    assert env["KUBERL_EXPERIMENT_NAMESPACE"]["value"] == "research"
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "cartpole-ray-token", "key": "token"}}
    assert pod["spec"]["restartPolicy"] == "Never"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/kuberl"]["readOnly"] is True and "/tmp" in mounts and "/dev/shm" in mounts
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "cartpole-config"
    assert {p["containerPort"] for p in container["ports"]} == {6379, 10001, 8265, 8080}


def test_storage_credentials_only_through_secret_refs():
    pod = build_head_pod(experiment(), owner(), 1, status_port=PORT)
    env = env_of(pod)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": key}}}
    assert env["AWS_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    no_secret = build_head_pod(experiment(storage={"uri": "s3://bucket/runs"}), owner(), 1, status_port=PORT)
    assert not any(name.startswith("AWS_") for name in env_of(no_secret))
    for body in (pod, build_worker_pod(experiment(), owner(), 0, 1, status_port=PORT)):
        assert all("valueFrom" in e for e in body["spec"]["containers"][0]["env"] if e["name"].startswith("AWS_"))


def test_worker_pod_joins_the_head_service():
    pod = build_worker_pod(experiment(), owner(), 1, 2, status_port=PORT)
    assert pod["metadata"]["name"] == "cartpole-worker-1"
    assert pod["metadata"]["labels"]["kuberl.io/role"] == "worker"
    script = pod["spec"]["containers"][0]["command"][2]
    assert "ray start --address=cartpole-head:6379 --node-ip-address=${POD_IP} --block" in script
    assert "--num-cpus=4" in script
    assert env_of(pod)["KUBERL_ATTEMPT"]["value"] == "2"
    assert "KUBERL_EXPECTED_NODES" not in env_of(pod)


def test_security_context_everywhere():
    for pod in (build_head_pod(experiment(), owner(), 1, status_port=PORT),
                build_worker_pod(experiment(), owner(), 0, 1, status_port=PORT)):
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["spec"]["automountServiceAccountToken"] is False
        sc = pod["spec"]["containers"][0]["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["runAsNonRoot"] is True


def test_resources_and_gpus():
    exp = experiment(head={"cpu": "500m", "memory": "2Gi", "gpus": 1},
                     workers={"replicas": 1, "cpu": "3", "memory": "6Gi", "gpus": 2}, learner={"gpus": 1})
    head = build_head_pod(exp, owner(), 1, status_port=PORT)
    res = head["spec"]["containers"][0]["resources"]
    assert res == {"requests": {"cpu": "500m", "memory": "2Gi"},
                   "limits": {"cpu": "500m", "memory": "2Gi", "nvidia.com/gpu": "1"}}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in head["spec"]["tolerations"]
    assert "--num-gpus=1" in head["spec"]["containers"][0]["command"][2]
    assert "--num-cpus=1" in head["spec"]["containers"][0]["command"][2]
    worker = build_worker_pod(exp, owner(), 0, 1, status_port=PORT)
    assert worker["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    cpu_only = build_worker_pod(experiment(), owner(), 0, 1, status_port=PORT)
    assert "nvidia.com/gpu" not in cpu_only["spec"]["containers"][0]["resources"]["limits"]
    assert "tolerations" not in cpu_only["spec"]


def test_scheduling_fields_are_passed_through():
    exp = experiment(head={"nodeSelector": {"pool": "gpu"},
                           "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "rl",
                                            "effect": "NoSchedule"}]},
                     serviceAccountName="trainer", priorityClassName="high")
    pod = build_head_pod(exp, owner(), 1, status_port=PORT)
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "rl",
                                           "effect": "NoSchedule"}]
    assert pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["priorityClassName"] == "high"
    assert "serviceAccountName" not in build_head_pod(experiment(), owner(), 1, status_port=PORT)["spec"]


def test_network_policy_admits_own_pods_and_the_status_port_from_operator_and_prometheus():
    body = build_network_policy(owner(), operator_namespace="kuberl-system", prometheus_namespace="monitoring",
                                status_port=PORT)
    spec = body["spec"]
    assert spec["podSelector"] == {"matchLabels": {"kuberl.io/experiment": "cartpole"}}
    assert spec["policyTypes"] == ["Ingress"]
    own, status = spec["ingress"]
    assert own == {"from": [{"podSelector": {"matchLabels": {"kuberl.io/experiment": "cartpole"}}}]}
    assert status["ports"] == [{"protocol": "TCP", "port": 8080}]
    namespaces = [f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for f in status["from"]]
    assert namespaces == ["kuberl-system", "monitoring"]


def test_token_secret_carries_the_given_token():
    token = new_token()
    assert len(token) >= 32 and token != new_token()
    body = build_token_secret(owner(), token)
    assert body["metadata"]["name"] == "cartpole-ray-token"
    assert base64.b64decode(body["data"]["token"]).decode() == token


def test_builders_are_deterministic():
    assert build_head_pod(experiment(), owner(), 1, status_port=PORT) == \
        build_head_pod(experiment(), owner(), 1, status_port=PORT)
    assert build_config_map(experiment(), owner()) == build_config_map(experiment(), owner())


@pytest.mark.parametrize(("cpu", "expected"), [("500m", 1), ("2", 2), ("1.5", 2), (3, 3), ("2500m", 3)])
def test_ray_cpus(cpu, expected):
    assert ray_cpus(cpu) == expected


def test_settings_from_env_and_their_errors():
    settings = Settings.from_env({"KUBERL_TRAINER_IMAGE": "img:9", "KUBERL_WATCH_NAMESPACES": "a, b,",
                                  "KUBERL_DEFAULT_WORKER_CPU": "750m", "KUBERL_STATUS_POLL_SECONDS": "2.5"})
    assert settings.trainer_image == "img:9"
    assert settings.watch_namespaces == ("a", "b")
    assert settings.default_worker_cpu == "750m"
    assert settings.status_poll_seconds == 2.5
    with pytest.raises(SettingsError, match="KUBERL_DEFAULT_HEAD_MEMORY"):
        Settings.from_env({"KUBERL_DEFAULT_HEAD_MEMORY": "lots"})
    with pytest.raises(SettingsError, match="KUBERL_STATUS_POLL_SECONDS"):
        Settings.from_env({"KUBERL_STATUS_POLL_SECONDS": "soon"})
    assert Settings.from_env({}).status_port == 8080
    assert Settings.from_env({"KUBERL_STATUS_PORT": "9191"}).status_port == 9191
    for bad in ("0", "65536", "80.5", "http"):
        with pytest.raises(SettingsError, match="KUBERL_STATUS_PORT"):
            Settings.from_env({"KUBERL_STATUS_PORT": bad})


def test_watch_scope_flags_win_over_the_environment():
    from kuberl.operator.main import watch_scope

    assert watch_scope([], True, ("a",)) == (True, [])
    assert watch_scope(["x"], False, ("a",)) == (False, ["x"])
    assert watch_scope([], False, ("a", "b")) == (False, ["a", "b"])
    assert watch_scope([], False, ()) == (True, [])


def test_a_moved_status_port_moves_the_trainer_its_service_probe_and_network_policy():
    """KUBERL_STATUS_PORT on the operator: every child that names the trainer's status port follows it."""
    port = Settings.from_env({"KUBERL_STATUS_PORT": "9191"}).status_port
    head = build_head_pod(experiment(), owner(), 1, status_port=port)
    container = head["spec"]["containers"][0]
    assert env_of(head)["KUBERL_STATUS_PORT"] == {"name": "KUBERL_STATUS_PORT", "value": "9191"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "gcs": 6379, "client": 10001, "dashboard": 8265, "status": 9191}
    service = build_head_service(owner(), status_port=port)
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "gcs": (6379, 6379), "client": (10001, 10001), "dashboard": (8265, 8265), "status": (9191, 9191)}
    worker = build_worker_pod(experiment(), owner(), 0, 1, status_port=port)
    script = worker["spec"]["containers"][0]["command"][2]
    assert 'socket.create_connection(("cartpole-head", 9191), 2)' in script
    assert "8080" not in script
    assert "KUBERL_STATUS_PORT" not in env_of(worker)  # workers serve no status
    policy = build_network_policy(owner(), operator_namespace="kuberl-system", prometheus_namespace="monitoring",
                                  status_port=port)
    assert policy["spec"]["ingress"][1]["ports"] == [{"protocol": "TCP", "port": 9191}]


def test_the_head_tells_its_trainer_the_default_status_port_too():
    assert env_of(build_head_pod(experiment(), owner(), 1, status_port=PORT))["KUBERL_STATUS_PORT"]["value"] == "8080"
