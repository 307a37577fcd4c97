"""The code blocks of README.md and docs/*.md marked `<!-- runnable -->` run as pasted.

Each page's runnable blocks run in order, each in its own Python process, in an empty directory with a
copy of examples/ (as in a checkout): what one block writes (a checkpoint), the next may read. They are
kept quick (a CartPole run of a few hundred env steps at most, or pure API calls).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"
RUNNABLE = re.compile(r"^" + re.escape(MARKER) + r"\n```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCK_TIMEOUT = 240  # a hang guard, not a bound


def runnable_blocks(text: str) -> list[str]:
    blocks = RUNNABLE.findall(text)
    marked = text.count(MARKER)
    assert len(blocks) == marked, f"{marked} {MARKER} markers, but {len(blocks)} of them precede a ```python block"
    return blocks


def test_markers_find_their_blocks() -> None:
    text = f"{MARKER}\n```python\nprint(1)\n```\n\n```python\nnot run\n```\n{MARKER}\n```python\nx = 2\n```\n"
    assert runnable_blocks(text) == ["print(1)\n", "x = 2\n"]
    with pytest.raises(AssertionError, match="precede"):
        runnable_blocks(f"{MARKER}\n```sh\nls\n```\n")


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if MARKER in p.read_text()], ids=lambda p: p.name)
def test_runnable_blocks_run_as_pasted(page: Path, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "RAY_ENABLE_AUTO_CONNECT": "0", "KUBERL_TORCH_THREADS": "1"}
    for number, code in enumerate(runnable_blocks(page.read_text()), 1):
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT, check=False)
        assert done.returncode == 0, f"{page.name}, runnable block {number}:\n{code}\n{done.stdout}\n{done.stderr}"
