"""The pure parts of the stand-in pod runner: env, volumes, names, ports."""

from __future__ import annotations

import base64
import fcntl

import pytest

from kuberl_testing.podrunner import AddressPool
from kuberl_testing.podrunner.addresses import CLAIMS
from kuberl_testing.podrunner.localpod import (
    Endpoint,
    PodSetupError,
    expand_dependent_vars,
    plan_ports,
    referenced_hosts,
    resolve_env,
    rewrite_addresses,
    rewrite_paths,
    rewrite_port_flags,
    secret_values,
    selector_matches,
    service_endpoint,
    service_hostnames,
    volume_files,
)

POD = {"metadata": {"name": "exp-head", "namespace": "research", "uid": "u-1", "labels": {"kuberl.io/role": "head"}},
       "spec": {"containers": [{"name": "head"}], "volumes": [
           {"name": "config", "configMap": {"name": "exp-config"}},
           {"name": "creds", "secret": {"secretName": "s3", "items": [{"key": "AWS_ACCESS_KEY_ID", "path": "id"}]}},
           {"name": "scratch", "emptyDir": {}}]}}
SECRETS = {("research", "s3"): {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "shh"},
           ("research", "exp-ray-token"): {"token": "t0k3n"}}
CONFIG_MAPS = {("research", "exp-config"): {"experiment.yaml": "kind: RLExperiment\n"}}


def test_dependent_vars_expand_like_the_kubelet():
    env = {"POD_IP": "127.0.9.2"}
    assert expand_dependent_vars("$(POD_IP):6379", env) == "127.0.9.2:6379"
    assert expand_dependent_vars("$(MISSING) and $$(POD_IP)", env) == "$(MISSING) and $(POD_IP)"


def test_env_resolves_field_secret_and_config_map_references_in_order():
    container = {"env": [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "RAY_ADDRESS", "value": "$(POD_IP):6379"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kuberl.io/role']"}}},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "exp-ray-token", "key": "token"}}},
        {"name": "AWS_SESSION_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "NOPE", "optional": True}}},
        {"name": "SPEC", "valueFrom": {"configMapKeyRef": {"name": "exp-config", "key": "experiment.yaml"}}},
    ], "envFrom": [{"secretRef": {"name": "s3"}, "prefix": "X_"}]}
    env = resolve_env(POD, container, pod_ip="127.0.9.2", secrets=SECRETS, config_maps=CONFIG_MAPS)
    assert env["RAY_ADDRESS"] == "127.0.9.2:6379"
    assert env["POD_NAME"] == "exp-head"
    assert env["ROLE"] == "head"
    assert env["RAY_AUTH_TOKEN"] == "t0k3n"
    assert "AWS_SESSION_TOKEN" not in env
    assert env["SPEC"].startswith("kind:")
    assert env["X_AWS_SECRET_ACCESS_KEY"] == "shh"


@pytest.mark.parametrize("ref, message", [
    ({"secretKeyRef": {"name": "absent", "key": "k"}}, 'secret "absent" not found'),
    ({"secretKeyRef": {"name": "s3", "key": "NOPE"}}, "couldn't find key NOPE"),
    ({"configMapKeyRef": {"name": "absent", "key": "k"}}, 'configmap "absent" not found'),
])
def test_missing_references_keep_the_pod_waiting_with_the_kubelets_reason(ref, message):
    container = {"env": [{"name": "V", "valueFrom": ref}]}
    with pytest.raises(PodSetupError) as error:
        resolve_env(POD, container, pod_ip="127.0.9.2", secrets=SECRETS, config_maps=CONFIG_MAPS)
    assert error.value.reason == "CreateContainerConfigError"
    assert message in error.value.message


def test_secret_values_decode_data_and_take_string_data_as_is():
    secret = {"data": {"a": base64.b64encode(b"one").decode()}, "stringData": {"b": "two"}}
    assert secret_values(secret) == {"a": "one", "b": "two"}


def test_volumes_show_config_map_keys_selected_secret_items_and_empty_dirs():
    container = {"volumeMounts": [{"name": "config", "mountPath": "/etc/kuberl"},
                                  {"name": "creds", "mountPath": "/var/creds"},
                                  {"name": "scratch", "mountPath": "/scratch"}]}
    mounts = volume_files(POD, container, secrets=SECRETS, config_maps=CONFIG_MAPS)
    assert mounts == {"/etc/kuberl": {"experiment.yaml": "kind: RLExperiment\n"},
                      "/var/creds": {"id": "AKIA"}, "/scratch": {}}


def test_a_volume_whose_config_map_is_missing_is_a_setup_error():
    pod = {**POD, "spec": {"volumes": [{"name": "config", "configMap": {"name": "gone"}}]}}
    with pytest.raises(PodSetupError, match='configmap "gone" not found'):
        volume_files(pod, {"volumeMounts": [{"name": "config", "mountPath": "/etc/kuberl"}]},
                     secrets={}, config_maps={})


def test_paths_are_rewritten_only_at_path_boundaries():
    paths = {"/etc/kuberl": "/tmp/p/volumes/0", "/dev/termination-log": "/tmp/p/termination-log"}
    assert rewrite_paths("-f /etc/kuberl/experiment.yaml", paths) == "-f /tmp/p/volumes/0/experiment.yaml"
    assert rewrite_paths("/etc/kuberlish/x", paths) == "/etc/kuberlish/x"
    assert rewrite_paths("/dev/termination-log", paths) == "/tmp/p/termination-log"


def test_service_names_resolve_to_the_pod_address_and_its_local_ports():
    head = Endpoint("127.0.9.2", {6379: 41000, 8080: 18080})
    hosts = {name: head for name in service_hostnames("exp-head", "research", "research")}
    hosts["127.0.9.2"] = head
    assert rewrite_addresses("ray start --address=exp-head:6379 --block", hosts) == \
        "ray start --address=127.0.9.2:41000 --block"
    assert rewrite_addresses("http://exp-head.research.svc.cluster.local:8080/status", hosts) == \
        "http://127.0.9.2:18080/status"
    assert rewrite_addresses("127.0.9.2:6379", hosts) == "127.0.9.2:41000"
    assert rewrite_addresses("exp-head-config exp-headless /etc/exp-head 127.0.9.22:6379", hosts) == \
        "exp-head-config exp-headless /etc/exp-head 127.0.9.22:6379"
    assert rewrite_addresses("exp-head:9999", hosts) == "127.0.9.2:9999"


def test_short_service_names_only_resolve_in_their_own_namespace():
    assert "exp-head" in service_hostnames("exp-head", "research", "research")
    assert "exp-head" not in service_hostnames("exp-head", "research", "other")
    assert referenced_hosts("--address=exp-head:6379", ["exp-head", "other"]) == {"exp-head"}


def test_service_ports_map_through_named_and_numbered_target_ports():
    pod = {"spec": {"containers": [{"ports": [{"name": "gcs", "containerPort": 6379},
                                              {"name": "status", "containerPort": 8080}]}]}}
    service = {"spec": {"ports": [{"port": 6379, "targetPort": "gcs"}, {"port": 80, "targetPort": 8080}]}}
    endpoint = service_endpoint(service, pod, Endpoint("127.0.9.2", {6379: 41000, 8080: 18080}))
    assert endpoint.ports == {6379: 41000, 80: 18080}


def test_port_flags_follow_the_pods_local_ports_in_argv_and_shell_strings():
    ports = {6379: 41000}
    assert rewrite_port_flags(["ray", "start", "--port", "6379", "--min-worker-port=6379x"], ports) == \
        ["ray", "start", "--port", "41000", "--min-worker-port=6379x"]
    assert rewrite_port_flags(["sh", "-c", "ray start --head --port=6379 --dashboard-port=8265"], ports) == \
        ["sh", "-c", "ray start --head --port=41000 --dashboard-port=8265"]


def test_declared_ports_get_fixed_or_fresh_local_ports():
    fresh = iter([50001, 50002])
    container = {"ports": [{"containerPort": 6379}, {"name": "status", "containerPort": 8080},
                           {"containerPort": 10001}]}
    assert plan_ports(container, {8080: 18080}, lambda: next(fresh)) == {6379: 50001, 8080: 18080, 10001: 50002}


def test_selectors_need_every_label_and_an_empty_selector_selects_nothing():
    assert selector_matches({"a": "1"}, {"a": "1", "b": "2"})
    assert not selector_matches({"a": "1", "c": "3"}, {"a": "1"})
    assert not selector_matches({}, {"a": "1"})


def test_address_pool_never_hands_out_127_0_0_1_and_reuses_released_addresses_last():
    pool = AddressPool(third_octet=9)
    first, second = pool.acquire(), pool.acquire()
    assert (first, second) == ("127.0.9.2", "127.0.9.3")
    pool.release(first)
    assert pool.acquire() == "127.0.9.4"
    with pytest.raises(ValueError):
        AddressPool(third_octet=0)


def _claimable(octet: int) -> bool:
    with open(CLAIMS / f"{octet}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def test_pools_side_by_side_never_draw_the_same_addresses_and_a_closed_pool_gives_its_own_back():
    pools = [AddressPool() for _ in range(40)]  # as many runners as two e2e suites ever hold at once, and more
    try:
        octets = [pool.third_octet for pool in pools]
        assert len(set(octets)) == len(octets)
        assert not any(_claimable(octet) for octet in octets)  # held, even against this process
        freed = pools.pop()
        freed.close()
        assert _claimable(freed.third_octet)
    finally:
        for pool in pools:
            pool.close()


def test_only_address_like_mentions_of_a_service_name_are_rewritten():
    hello = Endpoint("127.0.9.5", {80: 41080})
    hosts = {"hello": hello}
    assert rewrite_addresses('print(b"hello from")', hosts) == 'print(b"hello from")'
    assert rewrite_addresses("hello", hosts) == "127.0.9.5"
    assert rewrite_addresses("--host=hello --x", hosts) == "--host=127.0.9.5 --x"
    assert rewrite_addresses("http://hello/x http://hello:80/y", hosts) == "http://127.0.9.5/x http://127.0.9.5:41080/y"
    assert referenced_hosts("say hello", ["hello"]) == set()


def test_a_quoted_host_and_port_pair_is_rewritten_as_one_address():
    head = Endpoint("127.0.9.2", {6379: 41000})
    probe = "python -c 'import socket; socket.create_connection((\"exp-head\", 6379), 2)'"
    assert rewrite_addresses(probe, {"exp-head": head}) == \
        "python -c 'import socket; socket.create_connection((\"127.0.9.2\", 41000), 2)'"
    assert referenced_hosts(probe, ["exp-head"]) == {"exp-head"}
    assert rewrite_paths("HOME=/tmp /var/tmp", {"/tmp": "/x/v/0"}) == "HOME=/x/v/0 /var/tmp"


def test_paths_are_rewritten_in_one_pass():
    paths = {"/tmp": "/tmp/run/volumes/0", "/dev/termination-log": "/tmp/run/termination-log"}
    assert rewrite_paths("/dev/termination-log and /tmp/x", paths) == \
        "/tmp/run/termination-log and /tmp/run/volumes/0/x"


def test_a_pods_processes_are_found_by_their_environment_marker(tmp_path):
    from kuberl_testing.process_tree import MARKER_VARIABLE, processes_with_marker

    for pid, env in ((101, f"PATH=/bin\0{MARKER_VARIABLE}=abc\0"), (102, f"{MARKER_VARIABLE}=abcd\0"),
                     (103, "PATH=/bin\0")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(env.encode())
    (tmp_path / "self").mkdir()
    (tmp_path / "104").mkdir()  # a process that ended between listing and reading
    assert processes_with_marker("abc", proc_root=str(tmp_path)) == [101]


def test_a_pods_address_goes_back_to_the_pool_once():
    from kuberl_testing.podrunner.runner import PodRunner, _Pod

    runner = PodRunner.__new__(PodRunner)  # only the address bookkeeping, no API
    runner._pool = AddressPool(third_octet=9)
    pod = _Pod("uid-a", "ns", "a")
    pod.ip, pod.holds_ip = runner._pool.acquire(), True
    runner._release(pod)  # the pod finished
    in_use = [runner._pool.acquire() for _ in range(253)]  # every address, pod a's last
    assert in_use[-1] == pod.ip
    runner._release(pod)  # then it is deleted: its old address belongs to another pod now
    with pytest.raises(RuntimeError, match="no loopback address left"):
        runner._pool.acquire()
