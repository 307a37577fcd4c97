"""Generate docs/cli.md, the command-line reference, from the `kuberl` parser itself.

`python -m kuberl.cli_reference` (and `make crds`) writes it; a test regenerates it and compares, so the
page cannot drift from what `kuberl --help` says.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path

from kuberl.api.reference import write_generated_doc
from kuberl.cli import build_parser

CLI_DOC_FILE = Path("docs/cli.md")
_WIDTH = 100  # a fixed width: the usage lines must not depend on the terminal that generated them


def _fixed_width(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    # A HelpFormatter class, or one already given its width: both take `width`, where argparse's type only
    # promises a callable of `prog`.
    make: Callable[..., argparse.HelpFormatter] = parser.formatter_class
    parser.formatter_class = functools.partial(make, width=_WIDTH)
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order `--help` lists them."""
    found = []
    for action in parser._actions:  # argparse keeps no public list of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {action.metavar or action.dest.upper()}"
        else:
            name = str(action.metavar or action.dest)
        default = action.default
        shown = "" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
        meaning = action.help or ""
        if action.choices and not isinstance(action.choices, dict):
            meaning = f"{meaning} (one of: {', '.join(map(str, action.choices))})".strip()
        if action.required and action.option_strings:
            meaning = f"required. {meaning}".strip()
        rows.append(f"| `{name}` | {shown} | {_cell(meaning)} |")
    return rows


def _section(name: str, summary: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `{name}`", ""]
    if summary:
        out += [summary[0].upper() + summary[1:] + ("" if summary.endswith(".") else "."), ""]
    out += ["```", _fixed_width(parser).format_usage().strip(), "```", ""]
    rows = _argument_rows(parser)
    if rows:
        out += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
    for sub_name, sub_summary, sub in _subcommands(parser):
        out += _section(f"{name} {sub_name}", sub_summary, sub, level + 1)
    return out


def render_cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    parser = parser or build_parser()
    out = [
        "# Command-line reference",
        "",
        "Generated from the `kuberl` command's own parser (`src/kuberl/cli.py`) by `make crds`",
        "(`python -m kuberl.cli_reference`); do not edit. `kuberl COMMAND --help` prints the same.",
        "",
        "Exit codes: 0 done; 1 the run failed; 2 something to fix (the manifest, the storage location, the",
        "arguments: every problem on its own line, naming its field); 130 interrupted (Ctrl-C); 141 the",
        "reader of its output went away (`| head`); `kuberl train` stopped by SIGTERM: 143, after a final",
        "checkpoint.",
        "",
        "```",
        _fixed_width(parser).format_usage().strip(),
        "```",
        "",
        "| command | what it does |",
        "|---|---|",
        *[f"| [`{name}`](#kuberl-{name}) | {_cell(summary)} |" for name, summary, _ in _subcommands(parser)],
        "",
    ]
    for name, summary, sub in _subcommands(parser):
        out += _section(f"kuberl {name}", summary, sub, 2)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_generated_doc(CLI_DOC_FILE, render_cli_reference(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
