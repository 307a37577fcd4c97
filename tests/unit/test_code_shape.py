"""The code's shape, checked: no function in the trainer takes more than 7 parameters (a longer list is a
sign that some of them belong together in an object). Import circles: tests/unit/test_imports.py."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_PARAMETERS = 7


def test_no_trainer_function_takes_more_than_seven_parameters():
    too_many = []
    for path in sorted((SRC / "kuberl" / "trainer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [
                    x.arg for x in (a.vararg, a.kwarg) if x is not None]
                count = len([n for n in names if n not in ("self", "cls")])
                if count > MAX_PARAMETERS:
                    too_many.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({count})")
    assert too_many == []
