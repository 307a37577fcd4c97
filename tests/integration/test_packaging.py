"""kuberl's wheel, built for real: the package only, no test harness, nothing imported from the dev extra.

The harness (`kuberl_testing`: the API emulator, the pod runner, the S3 server) is its own
distribution under testing/; the wheel and the images must not carry it, and no installed module
may import what only the dev extra or the harness installs (kmock, attrs, moto, pytest, ...).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
HARNESS_ONLY = {"kuberl_testing", "kmock", "attrs", "moto"}  # what testing/pyproject.toml installs
HARNESS_FOLDERS = {"testing", "tests", "e2e", "bench"}


def _distribution_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _dev_modules() -> set[str]:
    """Top-level import names that only the dev extra's distributions provide (as installed in this venv).
    A name that a runtime extra also provides (`mlflow`: mlflow-skinny in the mlflow extra, the full
    server in dev) is the runtime extra's."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    dev = {_distribution_name(r) for r in extras["dev"]}
    runtime = {_distribution_name(r) for name, reqs in extras.items() if name != "dev" for r in reqs}
    runtime |= {_distribution_name(r) for r in PYPROJECT["project"]["dependencies"]}
    found = set()
    for module, dists in importlib.metadata.packages_distributions().items():
        names = {d.lower().replace("_", "-") for d in dists}
        if names & dev and not names & runtime:
            found.add(module)
    return found


def _imported_modules(source: str) -> set[str]:
    """Top-level names of every absolute import in a module, wherever it stands (lazy imports too)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """kuberl's wheel, built from a copy of the sources (so no build/ or egg-info lands in the tree)."""
    spec = importlib.util.find_spec("setuptools")
    assert spec is not None, "building the wheel needs setuptools in the venv (the dev extra installs it)"
    import setuptools

    assert int(setuptools.__version__.split(".")[0]) >= 77, f"setuptools {setuptools.__version__} < 77"
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    out = tmp / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (built,) = out.glob("kuberl-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_kuberl_package_and_nothing_else(wheel):
    names = wheel.namelist()
    assert "kuberl/cli.py" in names and "kuberl/py.typed" in names
    top = {name.split("/")[0] for name in names}
    (dist_info,) = top - {"kuberl"}
    assert re.fullmatch(r"kuberl-[0-9.]+\.dist-info", dist_info), top
    parts = {part for name in names for part in Path(name).parts}
    assert not parts & (HARNESS_FOLDERS | {"kuberl_testing"}), sorted(parts & (HARNESS_FOLDERS | {"kuberl_testing"}))
    tests = [n for n in names if re.search(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$", n)]
    assert tests == [], tests


def test_no_module_in_the_wheel_imports_the_harness_or_the_dev_extra(wheel):
    forbidden = HARNESS_ONLY | _dev_modules()
    assert {"pytest", "ruff"} <= forbidden  # the dev extra was read
    seen: set[str] = set()
    offenders = {}
    for name in wheel.namelist():
        if name.endswith(".py"):
            imported = _imported_modules(wheel.read(name).decode())
            seen |= imported
            if imported & forbidden:
                offenders[name] = sorted(imported & forbidden)
    assert {"kopf", "torch", "ray", "pydantic"} <= seen  # the scan does find imports, lazy ones too
    assert offenders == {}


def test_the_wheel_requires_nothing_from_the_harness(wheel):
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = [line.split(":", 1)[1].strip() for line in wheel.read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    assert requires, "the wheel's metadata lists its requirements"
    assert not {_distribution_name(r) for r in requires} & (HARNESS_ONLY | {"kuberl-testing"}), requires
    base = [r for r in requires if "extra ==" not in r]
    assert {_distribution_name(r) for r in base} == {"pyyaml", "pydantic"}, base


def test_the_images_build_context_holds_no_harness():
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    allowed = {rule[1:].strip("/").split("/")[0] for rule in rules if rule.startswith("!")}
    assert allowed, "the .dockerignore is an allow-list"
    assert not allowed & HARNESS_FOLDERS, allowed
    assert not list((ROOT / "src").rglob("kuberl_testing")) and not (ROOT / "src" / "kuberl" / "testing").exists()


@pytest.mark.parametrize("argv", [["operator", "--help"], ["--help"]])
def test_the_command_line_imports_no_trainer_stack_for_the_operator(argv):
    """An operator-only install (no torch, no Ray) runs `kuberl operator`: the CLI imports lazily."""
    code = ("import sys, contextlib, io\nfrom kuberl import cli\n"
            f"with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit): cli.main({argv!r})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray', 'gymnasium')"
            " or m.startswith('kuberl.trainer')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
