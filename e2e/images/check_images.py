"""Run the images `make images-local` built, the way the cluster runs them: `make images-check`.

- the operator image answers `kuberl operator --help` as the chart's non-root user with a
  read-only root filesystem, and carries no torch or Ray;
- neither image keeps the build host's pip configuration or its mount points;
- the CPU trainer image, as the uid the operator's pods run as, with a read-only root filesystem,
  a writable /tmp and a memory /dev/shm (the pod's mounts), trains examples/cartpole-ppo.yaml for a
  few thousand steps (one Ray rollout actor) into a mounted directory: results.jsonl and a
  checkpoint whose manifest matches its files appear there.

The file is not named test_*.py, so `make e2e` (pytest e2e) does not collect it: it needs podman
and the built images. `make images-check` builds them and names this file.
OPERATOR_IMAGE and TRAINER_IMAGE name the images (the Makefile's tags).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kuberl.operator.builders.pod import RUN_AS_USER as TRAINER_POD_UID

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "cartpole-ppo.yaml"
STOP_TIMESTEPS = 4096
# Loopback only: the containers share the host's network namespace and bind 127.0.0.0/8 addresses.
PODMAN_RUN = ["podman", "run", "--rm", "--network=host", "--read-only"]


def _runtime_options() -> list[list[str]]:
    """podman's defaults first, then what machines without CAP_SYS_RESOURCE and with hybrid cgroups
    need: rlimits no higher than this process's (podman asks for more and the runtime may not raise
    them) and runc, since crun refuses hybrid cgroups even with --cgroups=disabled."""
    limits = []
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        value = min(resource.getrlimit(limit)[1], 16384)
        limits.append(f"--ulimit={name}={value}:{value}")
    return [[], [*limits, "--cgroups=disabled"], [*limits, "--runtime=runc"]]


@functools.cache
def runtime_options(image: str) -> list[str]:
    """The first set of runtime options this machine can start a container with (a shell's `true`)."""
    errors = []
    for options in _runtime_options():
        proc = subprocess.run([*PODMAN_RUN, *options, "--entrypoint", "/bin/sh", image, "-c", "true"],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            return options
        errors.append(f"{' '.join(options) or 'defaults'}: {proc.stderr.strip()}")
    pytest.fail("podman cannot start a container here:\n" + "\n".join(errors))


def image(variable: str) -> str:
    name = os.environ.get(variable)
    if not name:
        pytest.fail(f"{variable} is not set: run this through `make images-check`")
    if shutil.which("podman") is None:
        pytest.fail("podman is missing (Debian: apt-get install podman)")
    if subprocess.run(["podman", "image", "exists", name]).returncode != 0:
        pytest.fail(f"no image {name}: `make images-local` builds it")
    return name


def podman_run(image: str, *args: str, options: tuple[str, ...] = (), timeout: float) -> subprocess.CompletedProcess[str]:
    command = [*PODMAN_RUN, *runtime_options(image), *options, image, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def image_user(name: str) -> str:
    return subprocess.run(["podman", "image", "inspect", "--format", "{{.Config.User}}", name],
                          capture_output=True, text=True, check=True).stdout.strip()


def chart_user() -> str:
    values = yaml.safe_load((ROOT / "charts" / "kuberl" / "values.yaml").read_text())
    context = values["podSecurityContext"]
    return f"{context['runAsUser']}:{context['runAsGroup']}"


def test_operator_image_answers_help_as_non_root_on_a_read_only_root():
    operator = image("OPERATOR_IMAGE")
    assert image_user(operator) == chart_user()
    proc = podman_run(operator, "operator", "--help", options=("--user", chart_user()), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage: kuberl operator" in proc.stdout
    assert "--all-namespaces" in proc.stdout and "--namespace" in proc.stdout


def test_operator_image_runs_as_its_user_and_carries_no_torch_or_ray():
    operator = image("OPERATOR_IMAGE")
    probe = ("import importlib.util, os; "
             "print(os.getuid(), os.getgid(), [m for m in ('torch', 'ray', 'gymnasium') if importlib.util.find_spec(m)])")
    proc = podman_run(operator, "-c", probe, options=("--entrypoint", "python"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    uid, gid = chart_user().split(":")
    assert proc.stdout.split() == [uid, gid, "[]"]


@pytest.mark.parametrize("variable", ["OPERATOR_IMAGE", "TRAINER_IMAGE"])
def test_image_keeps_nothing_of_the_build_hosts_pip_configuration(variable):
    """images/build-local.sh mounts the host's pip configuration and package directories into the
    build's RUN steps; an image must not keep them (nor empty mount points in their place)."""
    probe = ("import os, sys; print(sorted(os.listdir('/opt')), "
             "[p for p in ('/etc/pip.conf', '/etc/xdg/pip', '/root/.config/pip', '/root/.host-pip') if os.path.lexists(p)])")
    proc = podman_run(image(variable), "-c", probe, options=("--entrypoint", "python", "--user", "0"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "['kuberl'] []"


def test_trainer_image_trains_cartpole_into_a_mounted_directory(tmp_path):
    trainer = image("TRAINER_IMAGE")
    pod_user = f"{TRAINER_POD_UID}:{TRAINER_POD_UID}"
    assert image_user(trainer) == pod_user
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o777)  # the container's uid owns nothing on this machine
    command = ("ray --version && exec kuberl train -f /config/experiment.yaml --storage file:///runs --quiet "
               f"--set stop.timesteps={STOP_TIMESTEPS} --set rollouts.workers=1")
    mounts = ("--volume", f"{MANIFEST}:/config/experiment.yaml:ro", "--volume", f"{runs}:/runs")
    proc = podman_run(trainer, "/bin/sh", "-c", command,
                      options=("--user", pod_user, "--shm-size=512m", *mounts), timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "ray, version" in proc.stdout
    assert "Succeeded:" in proc.stdout, output

    run = runs / yaml.safe_load(MANIFEST.read_text())["metadata"]["name"]
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert results and results[-1]["timesteps"] >= STOP_TIMESTEPS
    assert [r["iteration"] for r in results] == list(range(1, len(results) + 1))

    pointer = json.loads((run / "checkpoints" / "latest").read_text())
    latest = run / "checkpoints" / pointer["checkpoint"]
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["timesteps"] == results[-1]["timesteps"]
    assert manifest["files"], manifest
    for name, entry in manifest["files"].items():
        data = (latest / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"]), name
    assert {p.stat().st_uid for p in run.rglob("*")} == {TRAINER_POD_UID}, "written as the pod's uid"
