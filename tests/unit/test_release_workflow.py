"""The GitHub workflows lint clean with actionlint (its binary comes in the dev extra's wheel), and the release
workflow publishes what the chart installs by default: the three images under the registry and names of
values.yaml at the chart's appVersion, each digest in the release notes, and the chart itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yaml"))
RELEASE = ROOT / ".github" / "workflows" / "release.yaml"
ACTIONLINT = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")


def actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    assert ACTIONLINT, "actionlint is missing: make install (the dev extra has its wheel)"
    return subprocess.run([ACTIONLINT, "-no-color", *map(str, paths)], capture_output=True, text=True, timeout=120)


def test_every_workflow_lints_clean():
    result = actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_does_flag_a_broken_workflow(tmp_path):
    broken = tmp_path / ".github" / "workflows" / "broken.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
                      "      - run: echo ${{ matrix.image }}\n      - uses: actions/checkout\n")
    result = actionlint(broken)
    assert result.returncode == 1
    assert "matrix" in result.stdout and "actions/checkout" in result.stdout, result.stdout


@pytest.fixture(scope="module")
def release() -> dict:
    return yaml.safe_load(RELEASE.read_text())


def _script(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_a_release_runs_on_a_version_tag_and_checks_it_against_the_project(release):
    assert release[True]["push"] == {"tags": ["v*"]}  # YAML 1.1 reads the bare `on` key as true
    assert 'v$version' in _script(release["jobs"]["images"])


def test_the_release_publishes_the_images_the_chart_defaults_to(release):
    values = yaml.safe_load((ROOT / "charts" / "kuberl" / "values.yaml").read_text())
    repo = release["env"]["IMAGE_REPO"]
    assert values["image"]["repository"] == f"{repo}/kuberl-operator" and values["image"]["tag"] == ""
    assert values["trainer"]["image"]["repository"] == f"{repo}/kuberl-trainer" and values["trainer"]["image"]["tag"] == ""
    images = release["jobs"]["images"]
    makefile = (ROOT / "Makefile").read_text()
    built = re.search(r"^IMAGES\s*\?=\s*(.+)$", makefile, flags=re.M).group(1).split()
    assert images["strategy"]["matrix"]["image"] == built  # every Dockerfile, the CUDA trainer included
    script = _script(images)
    assert 'make images IMAGES="${{ matrix.image }}" IMAGE_REPO="$IMAGE_REPO" IMAGE_TAG="$VERSION"' in script
    for ref in ("$IMAGE_REPO/kuberl-operator:$VERSION", "$IMAGE_REPO/kuberl-trainer:$VERSION",
                "$IMAGE_REPO/kuberl-trainer:$VERSION-cuda"):
        assert f'ref="{ref}"' in script, ref
    assert 'docker push "$REF"' in script and "RepoDigests" in script
    assert images["permissions"]["packages"] == "write"


def test_the_release_notes_carry_every_digest_and_the_chart_is_pushed(release):
    job = release["jobs"]["release"]
    assert job["needs"] == "images"
    script = _script(job)
    for image in release["jobs"]["images"]["strategy"]["matrix"]["image"]:
        assert f"$(cat digests/{image})" in script, image
    assert 'helm push "dist/kuberl-$version.tgz" "$CHART_REPO"' in script and "$CHART_DIGEST" in script
    assert 'gh release create "$GITHUB_REF_NAME" "dist/kuberl-$VERSION.tgz"' in script
    assert "--notes-file dist/notes.md" in script
