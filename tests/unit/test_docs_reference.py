"""The manifest and sweep references describe every field, the items of lists of objects included."""

from __future__ import annotations

import pytest

from kuberl.api.reference import empty_meanings, render_reference
from kuberl.api.sweep_reference import render_sweep_reference

REFERENCES = {"docs/manifest.md": render_reference, "docs/sweep-reference.md": render_sweep_reference}


@pytest.mark.parametrize("page", list(REFERENCES))
def test_every_field_of_the_reference_has_a_meaning(page: str) -> None:
    empty = empty_meanings(REFERENCES[page]())
    assert not empty, f"{page}: fields without a description (Field(description=...) in src/kuberl/api/): {empty}"


@pytest.mark.parametrize(("page", "item_row"), [
    ("docs/manifest.md", "`spec.multiAgent.policies[].agents`"),
    ("docs/manifest.md", "`spec.head.tolerations[].effect`"),
    ("docs/sweep-reference.md", "`spec.parameters[].values`"),
])
def test_list_items_are_described_field_by_field(page: str, item_row: str) -> None:
    assert f"| {item_row} |" in REFERENCES[page]()


def test_empty_meanings_finds_a_row_without_one() -> None:
    table = "| `spec.a` | int | `1` |  | Something. |\n| `spec.b` | int | `2` | >= 0 |  |\n"
    assert empty_meanings(table) == ["`spec.b`"]
