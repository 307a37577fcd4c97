"""A user's own module (an env, callbacks) written to a temporary directory and importable for one test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def importable_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Iterator[str]:
    """Write `name`.py, put its directory on sys.path, yield the module name and forget the import after."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
