"""The import graph of src/kuberl, read with `ast`: no cycles, and the operator's side stays light.

Two graphs: the one Python runs at import time (module-level imports; an import inside a function runs
when it is called, and imports under `if TYPE_CHECKING:` never run) must have no cycle, or loading
fails; the whole one (every import anywhere, TYPE_CHECKING's too) must have none either, so that each
module's dependencies point one way and it can be read without the modules that use it. kuberl.api and
kuberl.operator must import neither torch, ray, gymnasium nor kuberl.trainer, anywhere: the
operator's image does not have them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("torch", "ray", "gymnasium", "kuberl.trainer")
LIGHT_PACKAGES = ("kuberl.api", "kuberl.operator")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted((SRC / "kuberl").rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Full names an import statement loads: `from a import b` loads a.b when that is a module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    names = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
    return names or [base]


def _imports(module: str, *, module_level_only: bool, type_checking: bool = False) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.update(_imported(module, node))
            elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
                visit(node.orelse)
            elif module_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    children = getattr(node, field, None)
                    if isinstance(children, list):
                        visit([c for c in children if isinstance(c, ast.stmt | ast.excepthandler)])

    visit(tree.body)
    return found


GRAPH: dict[str, set[str]] = {
    module: {name for name in _imports(module, module_level_only=True) if name in MODULES} for module in MODULES
}

EVERY_IMPORT: dict[str, set[str]] = {
    module: {name for name in _imports(module, module_level_only=False, type_checking=True) if name in MODULES}
    for module in MODULES
}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph[node]):
            if child not in index:
                connect(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_graph_is_read() -> None:
    assert "kuberl.trainer.distributed.shard_learner" in GRAPH["kuberl.trainer.algorithms.sharded"]
    assert "kuberl.api.algorithms" in GRAPH["kuberl.api.types"]
    # TYPE_CHECKING imports do not run: base.py names Callbacks only for type hints.
    assert "kuberl.trainer.run.callbacks" not in GRAPH["kuberl.trainer.algorithms.base"]
    assert "kuberl.trainer.run.callbacks" in EVERY_IMPORT["kuberl.trainer.algorithms.base"]
    assert "kuberl.trainer.storage.checkpoints" in EVERY_IMPORT["kuberl.trainer.algorithms.base"]  # in save()


def test_finds_a_cycle_when_there_is_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_src() -> None:
    assert _cycles(GRAPH) == []


def test_no_import_circle_counting_type_checking_and_function_imports() -> None:
    assert _cycles(EVERY_IMPORT) == []


def _heavy_imports(module: str) -> list[str]:
    """Heavy libraries the module imports (at any level), or that what it imports loads at import time."""
    reached = set(_imports(module, module_level_only=False))
    todo = [name for name in reached if name in MODULES]
    while todo:
        for name in _imports(todo.pop(), module_level_only=True):
            if name not in reached:
                reached.add(name)
                if name in MODULES:
                    todo.append(name)
    return sorted(name for name in reached if any(name == h or name.startswith(f"{h}.") for h in HEAVY))


def test_heavy_imports_are_found() -> None:
    assert "torch" in _heavy_imports("kuberl.trainer.algorithms.ppo")
    assert "ray" in _heavy_imports("kuberl.trainer.sampling.worker_set")  # inside a function
    assert "gymnasium" in _heavy_imports("kuberl.trainer.run.checks")  # through sampling.envs
    assert "kuberl.trainer.algorithms.config" in _heavy_imports("kuberl.trainer.evaluation.checkpoint")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(LIGHT_PACKAGES)))
def test_api_and_operator_stay_light(module: str) -> None:
    assert _heavy_imports(module) == []
