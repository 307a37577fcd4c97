"""The cluster quick start as the docs write it: the shell block that follows a marker comment, read as
the commands a user would type (comments dropped, continuation lines joined, `&` noted).

The e2e scenario that runs it (e2e/control_plane/test_quickstart_on_real_server.py) and the unit tests
that hold its shape (tests/unit/test_quickstart.py) both read the block from README.md with this module,
so the page is what is tested, never a copy of it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

MARKER = "<!-- quickstart-cluster -->"
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Command:
    line: int                # where it starts in the page (1-based)
    text: str                # as written, continuation lines joined, comment dropped
    argv: tuple[str, ...]
    background: bool = False  # it ends with `&`

    @property
    def program(self) -> str:
        return self.argv[0]

    def option(self, *names: str) -> str | None:
        """The value of the first of `names` (`-n X`, `--namespace=X`), if given."""
        for i, word in enumerate(self.argv):
            for name in names:
                if word == name and i + 1 < len(self.argv):
                    return self.argv[i + 1]
                if word.startswith(name + "="):
                    return word.split("=", 1)[1]
        return None

    def values(self, name: str) -> list[str]:
        """Every value of a repeatable option (`--set a=b --set c=d`)."""
        return [self.argv[i + 1] for i, word in enumerate(self.argv[:-1]) if word == name]


def marked_block(page: str, marker: str = MARKER) -> tuple[int, str]:
    """The fenced shell block right after `marker`: its first line number (1-based) and its text."""
    lines = page.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == marker]
    if len(starts) != 1:
        raise ValueError(f"expected one {marker} in the page, found {len(starts)}")
    at = starts[0] + 1
    while at < len(lines) and not lines[at].strip():
        at += 1
    if at >= len(lines) or not (fence := _FENCE.match(lines[at])) or fence.group(1) not in ("sh", "bash", "shell"):
        raise ValueError(f"{marker} is not followed by a ```sh block")
    end = next((j for j in range(at + 1, len(lines)) if lines[j].strip() == "```"), None)
    if end is None:
        raise ValueError(f"the block after {marker} is not closed")
    return at + 2, "\n".join(lines[at + 1:end])


def commands(block: str, first_line: int = 1) -> list[Command]:
    """The block's commands, in order."""
    found: list[Command] = []
    pending: list[str] = []
    start = first_line
    for offset, raw in enumerate(block.splitlines()):
        if not pending:
            start = first_line + offset
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        pending.append(raw)
        logical, pending = " ".join(part.strip() for part in pending), []
        words = shlex.split(logical, comments=True)
        if not words:
            continue
        background = words[-1] == "&"
        if background:
            words = words[:-1]
        if any(word in ("|", "&&", "||", ";", ">", "<") for word in words):
            raise ValueError(f"line {start}: one command a line, no pipes or redirections: {logical}")
        text = shlex.join(words) + (" &" if background else "")
        found.append(Command(start, text, tuple(words), background))
    if pending:
        raise ValueError("the block ends inside a continued line")
    return found


def page_commands(page: str, marker: str = MARKER) -> list[Command]:
    first_line, block = marked_block(page, marker)
    return commands(block, first_line)
