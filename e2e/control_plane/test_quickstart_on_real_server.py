"""README.md's cluster quick start, run as written against a real kube-apiserver 1.20: the commands come
from the page itself (the shell block after `<!-- quickstart-cluster -->`, kuberl_testing.quickstart), so
the page cannot drift from what works. helm, kubectl (`make tools`) and kuberl run them on a bare control
plane (quickstartcluster.py); the experiment must reach Succeeded, with its results in the store.

What this harness cannot do as a user's machine would, and does instead (nothing else is changed):
- The cluster and image steps (kind, minikube, k3d, make images, docker, podman) are skipped: the node here
  is the pod runner, which runs pods as local processes from this checkout, so an image is only a name
  (the names the page sets must still reach the pods: the test checks the trainer pod's image).
- The cluster is reached through KUBECONFIG (the control plane's admin); helm, kubectl and kuberl come first
  on PATH.
- `helm install` gets a copy of the chart whose kubeVersion admits 1.20 (the chart asks for 1.28 or newer,
  which this control plane, built from Debian's sources, is not); nothing else in the chart differs.
- The chart's operator Deployment is installed but not run; `kuberl operator` runs here with its command,
  arguments and environment, on its ServiceAccount's token (quickstartcluster.py says why).
- MinIO's and MinIO client's images: the pod runner gives their containers moto's S3 server on the same
  port and a boto3 script making the same bucket (quickstartcluster.image_stand_ins); the Deployment,
  Service, Secret and Job are the page's.
- `kubectl port-forward` is skipped (the pod runner has no streaming endpoint); the address it would give,
  localhost:PORT, is replaced by the MinIO pod's own address and that port.
- A watch (`-w`) is followed until the experiment it shows has ended, then stopped, as a user's Ctrl-C.

Time: about 3 minutes on 2 cores (the control plane's start, the chart, and PPO training CartPole to the
example's stop in one pod).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from experiments import Experiments
from quickstartcluster import QuickstartCluster, image_stand_ins

from kuberl_testing.quickstart import Command, page_commands

pytestmark = pytest.mark.timeout(1200)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TOOLS = ROOT / ".tools" / "bin"
SKIPPED = {"kind", "minikube", "k3d", "make", "docker", "podman"}
COMMAND_SECONDS = 300
WATCH_SECONDS = 900  # a hang guard for the whole training run


def _experiment_namespace(commands: list[Command]) -> str:
    """The namespace the page creates for experiments (`kubectl create namespace X`)."""
    (namespace,) = {c.argv[3] for c in commands if c.argv[1:3] == ("create", "namespace")}
    return namespace


def _forwarded_ports(commands: list[Command]) -> dict[str, int]:
    """`kubectl port-forward svc/X LOCAL:REMOTE`: 'localhost:LOCAL' -> REMOTE."""
    ports = {}
    for command in commands:
        if "port-forward" in command.argv:
            local, _, remote = command.argv[-1].partition(":")
            ports[f"localhost:{local}"] = int(remote or local)
    return ports


def _user_checkout(where: Path) -> Path:
    """The directory the commands run in: examples/ as they are, and the chart with kubeVersion for 1.20."""
    where.mkdir()
    (where / "examples").symlink_to(ROOT / "examples")
    chart = where / "charts" / "kuberl"
    shutil.copytree(ROOT / "charts" / "kuberl", chart)
    text = (chart / "Chart.yaml").read_text()
    assert "kubeVersion:" in text
    (chart / "Chart.yaml").write_text("\n".join(
        'kubeVersion: ">=1.20.0-0"' if line.startswith("kubeVersion:") else line for line in text.splitlines()) + "\n")
    return where


class Session:
    """Runs the page's commands one by one, as a user's shell would, with the substitutions above."""

    def __init__(self, cluster: QuickstartCluster, commands: list[Command], cwd: Path, home: Path):
        self.cluster = cluster
        self.commands = commands
        self.cwd = cwd
        self.forwarded = _forwarded_ports(commands)
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
                    "KUBECONFIG": str(cluster.kubeconfig),
                    "PATH": os.pathsep.join([str(TOOLS), str(Path(sys.executable).parent), os.environ["PATH"]]),
                    "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
                    "HELM_DATA_HOME": str(home / "data")}
        self.outputs: dict[str, subprocess.CompletedProcess[str]] = {}
        self.skipped: list[str] = []
        self.experiment: str | None = None
        self.watched: list[str] = []
        self.trainer_images: set[str] = set()

    def run(self, command: Command) -> None:
        if command.program in SKIPPED:
            self.skipped.append(command.text)
        elif command.program == "export":
            self.env.update(word.split("=", 1) for word in command.argv[1:])
        elif "port-forward" in command.argv:
            assert command.background, f"line {command.line}: a port-forward runs in the background (&)"
            self.skipped.append(command.text)
        elif command.program == "kubectl" and "apply" in command.argv:
            self._apply(command)
        elif "-w" in command.argv or "--watch" in command.argv:
            self._watch(command)
        else:
            self._call(command, command.argv)
            if command.argv[:2] == ("helm", "install"):
                self.cluster.chart_installed(command.option("--namespace", "-n") or "default")

    def _call(self, command: Command, argv: tuple[str, ...] | list[str], stdin: str | None = None) -> None:
        argv = [self._local(word) for word in argv]
        result = subprocess.run(argv, cwd=self.cwd, env=self.env, input=stdin, capture_output=True, text=True,
                                timeout=COMMAND_SECONDS)
        self.outputs[command.text] = result
        assert result.returncode == 0, (f"README.md line {command.line}: {command.text} exited {result.returncode}:\n"
                                        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}\n"
                                        + self.cluster.diagnostics(self.cluster.namespace))

    def _local(self, word: str) -> str:
        for address, port in self.forwarded.items():
            if address in word:
                word = word.replace(address, f"{self._pod_behind_forward()}:{port}")
        return word

    def _pod_behind_forward(self) -> str:
        forward = next(c for c in self.commands if "port-forward" in c.argv)
        service = forward.argv[forward.argv.index("port-forward") + 1].removeprefix("svc/")
        namespace = forward.option("-n", "--namespace")
        core = Experiments(self.cluster.api_client, self.cluster).core
        selector = core.read_namespaced_service(service, namespace).spec.selector
        pods = core.list_namespaced_pod(namespace, label_selector=",".join(f"{k}={v}" for k, v in selector.items()))
        (ip,) = {p.status.pod_ip for p in pods.items if p.status.phase == "Running"}
        return ip

    def _apply(self, command: Command) -> None:
        path = self.cwd / command.option("-f", "--filename")
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if any(d["kind"] == "RLExperiment" for d in documents):
            (self.experiment,) = [d["metadata"]["name"] for d in documents]
            self._call(command, command.argv)  # as written: the operator and the trainer take it from here
            return
        replaced = [image_stand_ins(d) for d in documents]
        argv = list(command.argv)
        argv[argv.index(command.option("-f", "--filename"))] = "-"
        self._call(command, argv, stdin=yaml.safe_dump_all(replaced))

    def _watch(self, command: Command) -> None:
        """Follow the watch until the experiment's line shows it ended, then stop it (a user's Ctrl-C)."""
        assert self.experiment, f"line {command.line}: a watch before any experiment was applied"
        process = subprocess.Popen(list(command.argv), cwd=self.cwd, env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        ended = threading.Event()

        def follow() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.watched.append(line.rstrip())
                words = line.split()
                if words[:1] == [self.experiment] and len(words) > 1 and words[1] in ("Succeeded", "Failed"):
                    ended.set()
                    return

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        experiments = Experiments(self.cluster.api_client, self.cluster)
        deadline = time.monotonic() + WATCH_SECONDS
        while not ended.wait(2) and time.monotonic() < deadline and process.poll() is None:
            self.trainer_images |= {c.image for p in experiments.pods(self.experiment) for c in p.spec.containers}
        process.terminate()
        process.wait(10)
        assert ended.is_set(), (f"README.md line {command.line}: {command.text} never showed {self.experiment} "
                                f"ending:\n" + "\n".join(self.watched[-20:]) + "\n" + experiments.explain(self.experiment))


@pytest.fixture()
def commands() -> list[Command]:
    return page_commands(README.read_text())


@pytest.fixture()
def cluster(commands: list[Command], tmp_path: Path) -> Iterator[QuickstartCluster]:
    started = QuickstartCluster(tmp_path / "cluster", _experiment_namespace(commands),
                                fixed_ports=tuple(_forwarded_ports(commands).values())).start()
    try:
        yield started
    finally:
        started.stop()


def _results(endpoint: str, env: dict[str, str], uri: str) -> tuple[list[dict[str, Any]], list[str]]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
            for o in page.get("Contents", [])]
    body = s3.get_object(Bucket=bucket, Key=f"{prefix}/results.jsonl")["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines() if line.strip()], keys


def test_the_readme_quickstart_runs_as_written_to_a_trained_agent(commands: list[Command],
                                                                   cluster: QuickstartCluster,
                                                                   tmp_path: Path) -> None:
    session = Session(cluster, commands, _user_checkout(tmp_path / "checkout"), tmp_path / "helm")
    for command in commands:
        session.run(command)

    print("\nskipped (no image registry or cluster to create here):\n  " + "\n  ".join(session.skipped))
    print("the watch:\n  " + "\n  ".join(session.watched))
    assert {c.split()[0] for c in session.skipped} >= {"kind", "make"}, session.skipped
    name, namespace = session.experiment, cluster.namespace
    assert name is not None
    watched = [line.split() for line in session.watched]
    assert watched[0][:2] == ["NAME", "PHASE"] and ["Succeeded"] in [w[1:2] for w in watched if w[:1] == [name]], \
        session.watched
    # The trainer pods run the image the page's `helm install --set trainer.image...` names.
    helm = next(c for c in commands if c.argv[:2] == ("helm", "install"))
    trainer_repository = next(s.split("=", 1)[1] for s in helm.values("--set") if s.startswith("trainer.image"))
    assert session.trainer_images and all(i.startswith(trainer_repository + ":") for i in session.trainer_images), \
        session.trainer_images

    status = next(r for text, r in session.outputs.items() if text.startswith(f"kuberl status {name}"))
    assert "Phase:       Succeeded" in status.stdout, status.stdout
    logs = next(r for text, r in session.outputs.items() if text.startswith(f"kuberl logs {name}"))
    assert "Succeeded:" in logs.stdout, logs.stdout[-2000:]
    traces = next(c for c in commands if c.argv[:2] == ("kuberl", "traces"))
    assert (session.cwd / traces.option("--png")).stat().st_size > 0

    # The results, read from the store with boto3 (independently of kuberl), reached the example's stop.
    example = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    results, keys = _results(session._local(traces.option("--endpoint")), session.env, traces.argv[2])
    assert traces.argv[2] == f"{example['spec']['storage']['uri']}/{namespace}/{name}"
    assert results[-1]["episodeReturnMean"] >= example["spec"]["stop"]["episodeReturnMean"], results[-1]
    assert any("/checkpoints/" in key for key in keys) and any("/traces/" in key for key in keys), keys
    print(f"{name}: {results[-1]['iteration']} iterations, {results[-1]['timesteps']} steps, "
          f"return {results[-1]['episodeReturnMean']:.1f}")

    forbidden = cluster.forbidden_requests(cluster.operator_user)
    assert not forbidden, f"the operator's ServiceAccount was refused by RBAC: {forbidden[:10]}"
