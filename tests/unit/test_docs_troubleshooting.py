"""docs/troubleshooting.md explains every reason the operator can give in a condition or an event.

The reasons are collected from the code, not from a list kept here: the experiment's `Reason` enum,
and the literals the sweep's code passes as reasons (event tuples, `Outcome(...)`, `post_event(...)`,
its conditions).
"""

from __future__ import annotations

import ast
from pathlib import Path

from kuberl.api.types import Phase
from kuberl.operator.status.conditions import Reason

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
SOURCES = [*sorted((ROOT / "src/kuberl/operator").rglob("*.py")), *sorted((ROOT / "src/kuberl/sweep").rglob("*.py"))]
EVENT_TYPES = {"Normal", "Warning"}


def _reason_values(node: ast.expr) -> set[str]:
    """The reasons an expression can be: a string literal, `Phase.X`, `Reason.X`, or either side of `a if c else b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        enum = {"Phase": Phase, "SweepPhase": Phase, "Reason": Reason}.get(node.value.id)
        if enum is not None and node.attr in enum.__members__:
            return {enum[node.attr].value}
    if isinstance(node, ast.IfExp):
        return _reason_values(node.body) | _reason_values(node.orelse)
    return set()


def _function_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def reasons_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 3:  # (type, reason, message) events
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value in EVENT_TYPES:
                found |= _reason_values(node.elts[1])
        if isinstance(node, ast.Call):
            name, args = _function_name(node), node.args
            position = {"Outcome": 1, "post_event": 2, "_conditions": 2, "Event": 1}.get(name)
            if position is not None and len(args) > position:
                found |= _reason_values(args[position])
            found |= {v for kw in node.keywords if kw.arg == "reason" for v in _reason_values(kw.value)}
    return found


def operator_reasons() -> set[str]:
    found = {reason.value for reason in Reason}
    for path in SOURCES:
        found |= reasons_in(ast.parse(path.read_text(), str(path)))
    return found


def documented_reasons(page: str) -> set[str]:
    return {line.strip()[len("### `"):-1] for line in page.splitlines() if line.startswith("### `")}


def test_every_reason_the_operator_gives_has_a_section() -> None:
    missing = sorted(operator_reasons() - documented_reasons(PAGE.read_text()))
    assert not missing, f"docs/troubleshooting.md lacks a '### `Reason`' section for: {missing}"


def test_the_collector_finds_the_sweep_reasons_outside_the_enum() -> None:
    reasons = operator_reasons()
    assert {"TrialFailed", "TrialPruned", "PBTRound", "MaxFailedTrialsExceeded", "TargetReached"} <= reasons
    assert not {"Normal", "Warning", ""} & reasons


def test_the_collector_reads_each_form_a_reason_is_given_in() -> None:
    code = '''
events.append(("Warning", "FromATuple", "message"))
cluster.post_event(body, "Warning", "FromPostEvent", "message")
Outcome(SweepPhase.FAILED, "FromOutcome", "message")
_conditions(old, None, Phase.SUSPENDED if suspend else "FromIfExp", "", now)
Failure(attempt=1, reason=Reason.HEAD_FAILED, message="")
'''
    assert reasons_in(ast.parse(code)) == {"FromATuple", "FromPostEvent", "FromOutcome", "Suspended", "FromIfExp",
                                           "HeadFailed"}


def test_each_documented_reason_says_cause_and_fix() -> None:
    sections = PAGE.read_text().split("\n### `")[1:]
    for section in sections:
        name = section.split("`", 1)[0]
        assert "**Cause.**" in section and "**Fix.**" in section, name
