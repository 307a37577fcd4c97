"""The cluster quick start's shape, read from README.md (kuberl_testing.quickstart): every command names its
namespace, the images it builds are the ones it loads and installs, what it runs fits a 2-CPU node beside
the cluster's own pods, and the chart's README and docs/quickstart-cluster.md give the same steps. The e2e
scenario e2e/control_plane/test_quickstart_on_real_server.py runs the same block against a real API server.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from kuberl.api.validation import load_manifest
from kuberl_testing.quickstart import Command, commands, marked_block, page_commands

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CLUSTER_VERBS = ("submit", "list", "status", "logs", "delete", "dashboard")
# CPU requests of kind's own pods on its one node (kind v0.30, Kubernetes 1.34): kube-apiserver 250m,
# kube-controller-manager 200m, kube-scheduler 100m, etcd 100m, two coredns 100m each, kindnet 100m.
KIND_SYSTEM_CPU_MILLI = 950
NODE_CPU_MILLI = 2000


@pytest.fixture(scope="module")
def quickstart() -> list[Command]:
    return page_commands(README.read_text())


def _milli(quantity: str | int) -> int:
    text = str(quantity)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _applied(quickstart: list[Command]) -> list[Path]:
    return [ROOT / c.option("-f", "--filename") for c in quickstart if c.program == "kubectl" and "apply" in c.argv]


def test_every_cluster_command_names_its_namespace(quickstart):
    assert any(c.argv[:2] == ("helm", "install") for c in quickstart)
    for command in quickstart:
        if command.program == "kubectl" and command.argv[1:3] != ("create", "namespace"):
            assert command.option("-n", "--namespace"), f"README.md line {command.line}: {command.text}"
        if command.program == "helm":
            assert command.option("--namespace", "-n"), f"README.md line {command.line}: {command.text}"
        if command.program == "kuberl" and command.argv[1] in CLUSTER_VERBS:
            assert command.option("-n", "--namespace"), f"README.md line {command.line}: {command.text}"


def test_the_cluster_verbs_in_readmes_prose_name_the_namespace_too():
    text = README.read_text()
    mentioned = re.findall(rf"`(kuberl (?:{'|'.join(CLUSTER_VERBS)}) [^`]*)`", text)
    assert mentioned
    for snippet in mentioned:
        assert " -n " in f"{snippet} ", snippet


def test_the_images_built_are_the_ones_loaded_and_installed(quickstart):
    (build,) = [c for c in quickstart if c.argv[:2] == ("make", "images")]
    settings = dict(word.split("=", 1) for word in build.argv[2:])
    repo = settings["IMAGE_REPO"]
    assert set(settings["IMAGES"].split()) == {"operator", "trainer"}  # the CPU trainer
    built = {f"{repo}/kuberl-operator:{VERSION}", f"{repo}/kuberl-trainer:{VERSION}"}
    (load,) = [c for c in quickstart if c.argv[:3] == ("kind", "load", "docker-image")]
    assert set(load.argv[3:5]) == built
    (install,) = [c for c in quickstart if c.argv[:2] == ("helm", "install")]
    sets = dict(s.split("=", 1) for s in install.values("--set"))
    chart = yaml.safe_load((ROOT / "charts" / "kuberl" / "Chart.yaml").read_text())
    assert chart["appVersion"] == VERSION  # the tags the chart defaults to are the ones `make images` gives
    installed = {f"{sets['image.repository']}:{sets.get('image.tag', chart['appVersion'])}",
                 f"{sets['trainer.image.repository']}:{sets.get('trainer.image.tag', chart['appVersion'])}"}
    assert installed == built


def test_what_the_quickstart_runs_fits_a_2_cpu_kind_node(quickstart):
    from kuberl.operator.builders import Owner, build_head_pod, build_worker_pod, resolve_experiment
    from kuberl.operator.settings import Settings

    values = yaml.safe_load((ROOT / "charts" / "kuberl" / "values.yaml").read_text())
    requested = {"operator": _milli(values["resources"]["requests"]["cpu"])}
    for path in _applied(quickstart):
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
            if doc["kind"] == "RLExperiment":
                experiment = resolve_experiment(load_manifest(path.read_text()), Settings(), "research")
                owner = Owner(doc["metadata"]["name"], "research", "uid")
                pods = [build_head_pod(experiment, owner, 1, status_port=8080)] + [
                    build_worker_pod(experiment, owner, i, 1, status_port=8080)
                    for i in range(experiment.spec.workers.replicas)]
                assert experiment.spec.head.gpus == 0 and experiment.spec.workers.gpus == 0
            elif "template" in doc.get("spec", {}):
                pods = [doc["spec"]["template"]]
            else:
                continue
            for i, pod in enumerate(pods):
                cpu = sum(_milli(c["resources"]["requests"]["cpu"]) for c in pod["spec"]["containers"])
                requested[f"{path.name}/{doc['metadata']['name']}/{i}"] = cpu
    assert sum(requested.values()) <= NODE_CPU_MILLI - KIND_SYSTEM_CPU_MILLI, requested


def test_the_example_writes_to_the_store_and_secret_the_quickstart_makes(quickstart):
    manifests = _applied(quickstart)
    (secret,) = [c for c in quickstart if "secret" in c.argv and "create" in c.argv]
    secret_name = secret.argv[secret.argv.index("generic") + 1]
    store = [d for d in yaml.safe_load_all(manifests[0].read_text()) if d]
    service = next(d for d in store if d["kind"] == "Service")
    (job,) = [d for d in store if d["kind"] == "Job"]
    script = " ".join(job["spec"]["template"]["spec"]["containers"][0]["args"])
    bucket = re.search(r"\bmb (?:--\S+ )*\w+/(\S+)", script).group(1)
    storage = load_manifest(manifests[-1].read_text()).spec.storage
    assert storage.secret_ref.name == secret_name
    assert storage.uri.removeprefix("s3://").split("/")[0] == bucket
    assert storage.endpoint == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    traces = next(c for c in quickstart if c.argv[:2] == ("kuberl", "traces"))
    (namespace,) = [c.argv[3] for c in quickstart if c.argv[1:3] == ("create", "namespace")]
    name = load_manifest(manifests[-1].read_text()).metadata.name
    assert traces.argv[2] == f"{storage.uri}/{namespace}/{name}"


def _shell_commands(markdown: str) -> list[str]:
    blocks = re.findall(r"^```(?:sh|bash)\n(.*?)^```", markdown, flags=re.M | re.S)
    return [c.text for block in blocks for c in commands(block)]


def test_the_cluster_quickstart_page_gives_every_step_of_readmes(quickstart):
    page = (ROOT / "docs" / "quickstart-cluster.md").read_text()
    on_page = _shell_commands(page)
    missing = [c.text for c in quickstart if c.text not in on_page]
    assert not missing, f"README.md's quick start has commands docs/quickstart-cluster.md lacks: {missing}"


def test_the_charts_readme_points_to_the_same_steps(quickstart):
    chart_readme = (ROOT / "charts" / "kuberl" / "README.md").read_text()
    assert "docs/quickstart-cluster.md" in chart_readme
    section = chart_readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    readme_commands = {c.text for c in quickstart}
    stray = [c for c in _shell_commands(section) if c not in readme_commands]
    assert not stray, f"charts/kuberl/README.md's quick start differs from README.md's: {stray}"


def test_the_block_reader_joins_continuations_drops_comments_and_refuses_pipes():
    page = "text\n<!-- quickstart-cluster -->\n```sh\n# a comment\nhelm install a b \\\n  --set x=1  # why\n" \
           "kubectl port-forward svc/m 9:9 &\n```\n"
    line, block = marked_block(page)
    found = commands(block, line)
    assert [(c.line, c.argv, c.background) for c in found] == [
        (5, ("helm", "install", "a", "b", "--set", "x=1"), False),
        (7, ("kubectl", "port-forward", "svc/m", "9:9"), True)]
    with pytest.raises(ValueError, match="no pipes"):
        commands("kubectl get pods | grep x")
    with pytest.raises(ValueError, match="one <!-- quickstart-cluster -->"):
        marked_block("no marker here")
