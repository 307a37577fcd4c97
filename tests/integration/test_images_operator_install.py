"""The operator image's install step, run for real outside Docker.

The build context is reduced to what .dockerignore lets through, the venv is made the way the
Dockerfile makes it, and its RUN line is executed as written (with the venv path swapped in): the
result must start `kuberl operator` and hold no torch, Ray or Gymnasium.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "images" / "operator.Dockerfile"


def _build_context(dest: Path) -> None:
    """Copy what the .dockerignore allow-list admits (it excludes everything else)."""
    rules = [r.strip() for r in (ROOT / ".dockerignore").read_text().splitlines() if r.strip() and not r.startswith("#")]
    for rule in rules:
        if not rule.startswith("!"):
            continue
        source = ROOT / rule[1:].rstrip("/")
        if source.is_dir():
            shutil.copytree(source, dest / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, dest / source.name)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_operator_image_install_step_gives_a_slim_working_operator(tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    _build_context(context)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)

    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    (run,) = [line for line in text.splitlines() if line.startswith("RUN /opt/kuberl/bin/python -m pip install")]
    command = run.removeprefix("RUN ").replace("/opt/kuberl", str(venv))
    proc = subprocess.run(command, shell=True, cwd=context, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]

    help_text = subprocess.run([str(venv / "bin" / "kuberl"), "operator", "--help"], capture_output=True, text=True,
                               timeout=60)
    assert help_text.returncode == 0 and "--all-namespaces" in help_text.stdout
    imports = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util as u, kopf, kubernetes, kuberl.operator.settings;"
         "print(','.join(m for m in ('torch', 'ray', 'gymnasium') if u.find_spec(m)))"],
        capture_output=True, text=True, timeout=120,
    )
    assert imports.returncode == 0, imports.stderr
    assert imports.stdout.strip() == "", f"the operator image would carry {imports.stdout.strip()}"
