"""docs/cli.md is the `kuberl` parser's own reference: regenerated here and compared."""

from __future__ import annotations

import argparse
from pathlib import Path

from kuberl.cli import build_parser
from kuberl.cli_reference import render_cli_reference

ROOT = Path(__file__).resolve().parents[2]


def test_cli_page_is_what_the_parser_says() -> None:
    assert (ROOT / "docs" / "cli.md").read_text() == render_cli_reference(), \
        "docs/cli.md differs from the parser: run `make crds` (python -m kuberl.cli_reference)"


def test_every_subcommand_and_option_is_on_the_page() -> None:
    page = render_cli_reference()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert f"## `kuberl {name}`" in page
        for action in command._actions:
            if action.option_strings and action.help != argparse.SUPPRESS and action.dest != "help":
                assert f"`{', '.join(action.option_strings)}" in page, (name, action.option_strings)


def test_a_new_option_changes_the_page() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["train"].add_argument("--brand-new", help="an option the page has not seen")
    page = render_cli_reference(parser)
    assert "| `--brand-new BRAND_NEW` |  | an option the page has not seen |" in page
    assert page != render_cli_reference()
