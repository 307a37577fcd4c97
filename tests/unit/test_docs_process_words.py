"""User docs speak to users: no history of the work (rounds of work, sessions, numbered stops, issue numbers).

The lab notes (dated probes, failed attempts, CI post-mortems) live in bench/notes/, outside the user docs.
A PBT "round" (a sweep's concept) is a user word; "this round", "the second round" of work are not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "charts").glob("*/README.md")])

PROCESS_WORDS = re.compile(
    r"\bsessions?\b"                                                    # "five other sessions' tests"
    r"|\bstops?[ -]?\d+\b"                                              # "stop 39", "stop-38"
    r"|(?<![\w/(])#\d+\b"                                               # "#29"
    r"|\b(?:issues?|PR|pull request)s? #?\d+\b"                         # "issue 42"
    r"|\b(?:this|that|previous|earlier|later|first|second|third|fourth|fifth|"
    r"another|other|past) rounds?(?:'s)?\b(?! (?:of|R\b|\d))"           # "this round's changes", "second round"
    r"|\brounds? of (?:work|changes|fixes|review)\b",
    re.IGNORECASE,
)


def process_words(text: str) -> list[str]:
    return [f"{number}: {match.group(0)!r} in {line.strip()[:120]!r}"
            for number, line in enumerate(text.splitlines(), 1) for match in PROCESS_WORDS.finditer(line)]


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_docs_tell_no_history_of_the_work(page: Path) -> None:
    found = process_words(page.read_text())
    assert not found, f"{page.relative_to(ROOT)} speaks of the work, not to users:\n" + "\n".join(found)


@pytest.mark.parametrize("text", [
    "the machine was shared with five other sessions' tests", "CI post-mortem, stop 39:", "(stop-38)",
    "fixed in #29", "from the work of issue 7", "the operator before this round's changes", "second round;",
])
def test_process_words_are_found(text: str) -> None:
    assert process_words(text)


@pytest.mark.parametrize("text", [
    "PBT trains the population in rounds of perturbationInterval env steps", "round R of member N",
    "the next round starts", "three round trips instead of seven", "replay shards round robin",
    "stop: {timesteps: 100000}", "see [cli.md](cli.md#kuberl-train)", "the last round the members succeed",
])
def test_user_words_pass(text: str) -> None:
    assert not process_words(text)
