"""pytest imports test modules by basename (rootdir-relative, no packages), so two test files
with the same name in different folders stop `pytest tests` at collection."""

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_module_name_is_unique_across_tests_and_e2e() -> None:
    names = Counter(p.name for folder in ("tests", "e2e") for p in (ROOT / folder).rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
