"""What scenarios do with experiments, written only against the Kubernetes API and S3.

`Experiments` applies manifests, reads status, lists children and waits; `RunFiles` reads what
a run wrote to S3 and checks checkpoints against their manifests.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import boto3
import urllib3
from kubernetes import client as k8s
from kubernetes import watch

from kuberl.api.contract import EXPERIMENT_LABEL, ROLE_LABEL
from kuberl.api.types import GROUP, PLURAL, VERSION


class Cluster(Protocol):
    kind: str
    namespace: str
    storage_uri: str
    s3_endpoint: str
    local_s3_endpoint: str
    s3_secret: str
    trainer_image: str
    unpullable_image: str
    kueue_queue: str  # a LocalQueue of the experiments' namespace

    def kill_pod_process(self, namespace: str, name: str) -> None: ...
    def restart_operator(self) -> None: ...
    def pod_has_process(self, namespace: str, name: str) -> bool: ...
    def diagnostics(self, namespace: str, lines: int = 40) -> str: ...
    def s3_credentials(self) -> dict[str, Any]: ...
    def admit_queued(self, namespace: str, group: str) -> None: ...


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def tiny_ppo(name: str, cluster: Cluster, **spec: Any) -> dict[str, Any]:
    """CartPole PPO small enough for a 2-core machine: one Ray worker pod, one rollout actor.

    `spec` is merged into the base spec, except `config`, which replaces it (it is per algorithm).
    """
    config = spec.pop("config", {"numEpochs": 2, "minibatchSize": 128})
    base: dict[str, Any] = {
        "algorithm": "ppo",
        "env": {"id": "CartPole-v1"},
        "rollouts": {"workers": 1, "envsPerWorker": 4, "fragmentLength": 64},
        "stop": {"timesteps": 2560},
        "checkpoint": {"everyIterations": 2, "keep": 100},
        "traces": {"enabled": True},
        "storage": {"uri": cluster.storage_uri, "endpoint": cluster.s3_endpoint,
                    "secretRef": {"name": cluster.s3_secret}},
        "image": cluster.trainer_image,
        "head": {"cpu": "1", "memory": "2Gi"},
        "workers": {"replicas": 1, "cpu": "1", "memory": "1Gi"},
        "backoffLimit": 2,
    }
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLExperiment",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {**_deep_merge(base, spec), "config": config}}


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        merged[key] = _deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(
            merged.get(key), dict) else value
    return merged


class Experiments:
    def __init__(self, api: k8s.ApiClient, cluster: Cluster):
        self.cluster = cluster
        self.namespace = cluster.namespace
        self.custom = k8s.CustomObjectsApi(api)
        self.core = k8s.CoreV1Api(api)
        self.networking = k8s.NetworkingV1Api(api)

    # -- the resource --

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, manifest)

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, name: str) -> dict[str, Any]:
        return (self.get(name) or {}).get("status") or {}

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        for condition in self.status(name).get("conditions") or []:
            if condition.get("type") == kind:
                return condition
        return {}

    # -- children --

    def pods(self, name: str, role: str | None = None) -> list[k8s.V1Pod]:
        selector = f"{EXPERIMENT_LABEL}={name}" + (f",{ROLE_LABEL}={role}" if role else "")
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def running_pod(self, name: str, role: str) -> k8s.V1Pod | None:
        running = [p for p in self.pods(name, role) if p.status.phase == "Running"
                   and p.metadata.deletion_timestamp is None]
        return running[0] if running else None

    def children(self, name: str) -> dict[str, list[str]]:
        """Every kind of child object the operator makes, by name (empty lists when all are gone)."""
        return {kind: sorted(objects) for kind, objects in self.child_uids(name).items()}

    def child_uids(self, name: str) -> dict[str, dict[str, str]]:
        """Every kind of child object the operator makes: name -> uid (a recreated object has a new uid)."""
        selector = f"{EXPERIMENT_LABEL}={name}"
        ns = self.namespace
        listed = {
            "pods": self.core.list_namespaced_pod(ns, label_selector=selector).items,
            "services": self.core.list_namespaced_service(ns, label_selector=selector).items,
            "configmaps": self.core.list_namespaced_config_map(ns, label_selector=selector).items,
            "secrets": self.core.list_namespaced_secret(ns, label_selector=selector).items,
            "networkpolicies": self.networking.list_namespaced_network_policy(ns, label_selector=selector).items,
        }
        return {kind: {o.metadata.name: o.metadata.uid for o in objects} for kind, objects in listed.items()}

    def events(self, name: str) -> list[k8s.CoreV1Event]:
        return [e for e in self.core.list_namespaced_event(self.namespace).items
                if e.involved_object is not None and e.involved_object.name == name]

    # -- waiting --

    def wait(self, name: str, check: Callable[[], Any], what: str, timeout: float = 240.0,
             interval: float = 0.5) -> Any:
        """Poll `check` until it returns something true; on timeout fail with the cluster's logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n"
                             f"status of {name}: {json.dumps(self.status(name), indent=1)}\n"
                             + self.cluster.diagnostics(self.namespace))

    def wait_phase(self, name: str, *phases: str, timeout: float = 240.0) -> dict[str, Any]:
        return self.wait(name, lambda: (s := self.status(name)).get("phase") in phases and s,
                         f"{name} to reach phase {' or '.join(phases)}", timeout)

    def explain(self, name: str) -> str:
        """The experiment's status and the cluster's logs, for an assertion message."""
        return f"status: {json.dumps(self.status(name), indent=1)}\n" + self.cluster.diagnostics(self.namespace)


class RunFiles:
    """The objects a run wrote under storage.uri/NS/NAME/ (read with boto3, independently of kuberl)."""

    def __init__(self, cluster: Cluster, name: str):
        bucket, _, prefix = cluster.storage_uri.removeprefix("s3://").partition("/")
        self.bucket = bucket
        self.prefix = "/".join(p for p in (prefix.strip("/"), cluster.namespace, name) if p) + "/"
        self.uri = f"s3://{bucket}/{self.prefix}"
        self._s3 = boto3.client("s3", endpoint_url=cluster.local_s3_endpoint, **cluster.s3_credentials())

    def keys(self, under: str = "") -> list[str]:
        keys: list[str] = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + under):
            keys += [obj["Key"][len(self.prefix):] for obj in page.get("Contents", [])]
        return sorted(keys)

    def read(self, key: str) -> bytes:
        return self._s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()

    def results(self) -> list[dict[str, Any]]:
        if "results.jsonl" not in self.keys("results.jsonl"):
            return []
        return [json.loads(line) for line in self.read("results.jsonl").decode().splitlines() if line.strip()]

    def checkpoints(self) -> list[dict[str, Any]]:
        """Manifests of the complete checkpoints (every file present with its size and sha256), oldest first."""
        manifests = []
        keys = set(self.keys("checkpoints/"))
        for key in sorted(k for k in keys if k.endswith("/manifest.json")):
            manifest = json.loads(self.read(key))
            directory = key.rsplit("/", 1)[0]
            if all(f"{directory}/{file}" in keys for file in manifest["files"]):
                manifest["key"] = directory
                manifests.append(manifest)
        return manifests

    def verify(self, manifest: dict[str, Any]) -> None:
        """Every file of a checkpoint matches its manifest entry."""
        for file, meta in manifest["files"].items():
            data = self.read(f"{manifest['key']}/{file}")
            assert len(data) == meta["size"], f"{manifest['key']}/{file}: size {len(data)} != {meta['size']}"
            assert hashlib.sha256(data).hexdigest() == meta["sha256"], f"{manifest['key']}/{file}: sha256 differs"

    def episodes(self) -> list[dict[str, Any]]:
        records = []
        for key in self.keys("traces/"):
            if key.endswith(".jsonl.gz"):
                text = gzip.decompress(self.read(key)).decode()
                records += [json.loads(line) for line in text.splitlines() if line.strip()]
        return records


class PhaseWatch:
    """Every phase an experiment's status goes through, from a watch opened before it is created
    (each status write is a watch event, so no transition is missed)."""

    def __init__(self, experiments: Experiments, name: str):
        self.phases: list[str] = []
        self.ended = ""
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(experiments, name), daemon=True)
        self._thread.start()

    def _run(self, experiments: Experiments, name: str) -> None:
        try:
            self._follow(experiments, name)
        except urllib3.exceptions.HTTPError as exc:  # the stream ended (stop(), or the server going away)
            self.ended = repr(exc)

    def _follow(self, experiments: Experiments, name: str) -> None:
        for event in self._watch.stream(experiments.custom.list_namespaced_custom_object, GROUP, VERSION,
                                        experiments.namespace, PLURAL,
                                        field_selector=f"metadata.name={name}", timeout_seconds=600):
            phase = (event["object"].get("status") or {}).get("phase")
            if phase and (not self.phases or self.phases[-1] != phase):
                self.phases.append(phase)

    def stop(self) -> None:
        self._watch.stop()


def unannounced_phases(phases: list[str], events: list[k8s.CoreV1Event]) -> list[str]:
    """The phases in `phases` that no Event announces (a message "PHASE: ..."; the HeadCreated event
    stands for the move to Pending)."""
    def announces(event: k8s.CoreV1Event, phase: str) -> bool:
        return (event.message or "").startswith(phase) or (phase == "Pending" and event.reason == "HeadCreated")

    return [phase for phase in phases if not any(announces(e, phase) for e in events)]
