"""The experiment's phase is one enum, `kuberl.api.types.Phase`: no phase is written as a string anywhere
else in src/ (as tests/unit/test_contract.py checks for the contract's values).

Other vocabularies share some of its words, and each defines them once: a pod's phase (`PodPhase`), the
Succeeded condition (`ConditionType`), the trainer's summary results (`contract.RESULT_*`), a sweep trial's
state (`TrialState`) and the sweep's printer columns that count trials by state. The Argo CD and
Flux health checks are Lua and CEL and spell phases out; tests/unit/test_gitops.py keeps them to `Phase`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kuberl.api.types import Phase

SRC = Path(__file__).resolve().parents[2] / "src" / "kuberl"
PHASE_WORDS = {phase.value for phase in Phase}
# file (under src/kuberl) -> the classes and constants whose definitions may spell a phase's word
DEFINITIONS = {
    "api/types.py": {"Phase"},
    "api/contract.py": {"RESULT_SUCCEEDED", "RESULT_FAILED"},
    "operator/status/observation.py": {"PodPhase"},
    "operator/status/conditions.py": {"ConditionType"},
    "api/sweep_types.py": {"TrialState"},  # a sweep trial's state (Optuna's, as Katib and Ray Tune name them)
    "api/sweep_crd.py": {"SWEEP_COLUMNS"},  # `kubectl get rls` counts trials by state
}


def _defined(node: ast.AST) -> str | None:
    if isinstance(node, ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _phase_literals(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        name = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        allowed = DEFINITIONS.get(name, set())
        inside = {id(n) for node in tree.body if _defined(node) in allowed for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in PHASE_WORDS and id(node) not in inside:
                found.append(f"{name}:{node.lineno}: {node.value!r}")
    return found


def test_the_definitions_allowed_to_spell_a_phase_exist():
    for name, allowed in DEFINITIONS.items():
        tree = ast.parse((SRC / name).read_text())
        assert allowed <= {_defined(node) for node in tree.body}, name


def test_no_phase_is_written_as_a_literal_outside_the_enum():
    paths = [p for p in sorted(SRC.rglob("*.py")) if "trainer" not in p.relative_to(SRC).parts]
    assert _phase_literals(paths) == []


def test_the_trainer_writes_no_phase_as_a_literal():
    assert _phase_literals(sorted((SRC / "trainer").rglob("*.py"))) == []
