"""Trainer functions return `dict[str, Any]` only at the serialisation edges docs/architecture.md names.

A new function returning an untyped dict fails here until it gets a type, or is added to the list below
and named in "Where dicts remain" with the reason it is an edge.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINER = ROOT / "src" / "kuberl" / "trainer"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# module (relative to trainer/) -> the functions there whose result becomes JSON, a user's or a library's
SERIALISATION_EDGES = {
    "algorithms/base.py": {"evaluation_statistics", "Algorithm.train", "Algorithm.evaluate"},
    "algorithms/config.py": {"AlgorithmConfig.to_document"},
    "distributed/shard_worker.py": {"WorkerReport.to_json"},
    "iteration_result.py": {"IterationResult.to_json", "EvaluationResult.to_json", "EvaluationLine.to_json",
                            "ReplayStats.to_json", "NodePlacement.to_json", "PolicyResult.to_json"},
    "multiagent/algorithm.py": {"MultiAgentAlgorithm.evaluate"},
    "run/live_status.py": {"LiveStatus.snapshot"},
    "run/run_record.py": {"resolved_manifest"},
    "sampling/atari_vector.py": {"vector_kwargs"},
    "storage/checkpoint_listing.py": {"CheckpointRow.to_json"},
    "storage/checkpoints/protocol.py": {"_read_manifest"},
    "storage/s3.py": {"S3Store.__getstate__"},
    "tracking/wandb_run.py": {"wandb_config"},
}


def _returns_untyped_dict(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The result itself is a dict of names (or None); dicts inside a typed result (Gymnasium's info) are not."""
    if node.returns is None:
        return False
    annotation = node.returns
    parts = [annotation.left, annotation.right] if isinstance(annotation, ast.BinOp) else [annotation]
    return any(ast.unparse(part).replace("Dict", "dict") == "dict[str, Any]" for part in parts)


def untyped_dict_functions(source: str) -> set[str]:
    """The qualified names (Class.method or function) in `source` annotated to return dict[str, Any]."""
    found: set[str] = set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _returns_untyped_dict(node):
                found.add(prefix + node.name)

    visit(ast.parse(source).body, "")
    return found


def test_finder_sees_methods_functions_and_optional_results() -> None:
    source = ("from typing import Any\n"
              "class A:\n    def f(self) -> dict[str, Any]: ...\n    def g(self) -> dict[str, int]: ...\n"
              "def h() -> dict[str, Any] | None: ...\n"
              "def k() -> tuple[int, dict[str, Any]]: ...\n")
    assert untyped_dict_functions(source) == {"A.f", "h"}


def test_only_the_documented_edges_return_untyped_dicts() -> None:
    found = {path.relative_to(TRAINER).as_posix(): names
             for path in sorted(TRAINER.rglob("*.py"))
             if (names := untyped_dict_functions(path.read_text()))}
    assert found == SERIALISATION_EDGES


def test_every_edge_is_named_in_the_architecture_doc() -> None:
    section = ARCHITECTURE.read_text().split("### Where dicts remain", 1)[1].split("\n## ", 1)[0]
    missing = sorted(name for names in SERIALISATION_EDGES.values() for name in names
                     if not all(f"{part}" in section for part in name.split(".")))
    assert not missing, f"not named in docs/architecture.md, 'Where dicts remain': {missing}"
