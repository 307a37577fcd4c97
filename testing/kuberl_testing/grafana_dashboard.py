"""The chart's Grafana dashboard as the tests read it: its PromQL queries and the metric names in them,
and the series names a Prometheus scrape (the text exposition format) carries.

The tokenizer is only as much PromQL as telling a metric name from a function, an aggregation, a
keyword, a label name, a duration or a Grafana variable takes; it does not check the syntax.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "kuberl" / "dashboards" / "kuberl.json"

_TOKEN = re.compile(r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<space>\s+)
  | (?P<punct>.)
""", re.X | re.S)

_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")  # inside strings too
_OFFSET = re.compile(r"\boffset\s+-?(?:\d+(?:ms|[smhdwy]))+")
AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile", "limitk", "limit_ratio"})
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = AGGREGATIONS | LABEL_LIST_KEYWORDS | {"and", "or", "unless", "bool", "atan2", "inf", "nan"}
# Grafana's own variables, beside the dashboard's templating variables.
GRAFANA_VARIABLES = frozenset({"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                               "__range_ms", "__from", "__to", "__dashboard"})


def tokens(expr: str) -> list[tuple[str, str]]:
    """(kind, text) of every token but whitespace."""
    return [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr) if m.lastgroup != "space"]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (as written: `x_bucket`, `y_total`)."""
    toks = tokens(_OFFSET.sub(" ", expr))  # `offset 1h30m`: its units would read as names
    found: set[str] = set()
    braces = brackets = 0
    skip_parens = 0  # depth inside a `by (...)`-style label list
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "punct":
            braces += {"{": 1, "}": -1}.get(text, 0)
            brackets += {"[": 1, "]": -1}.get(text, 0)
            if skip_parens:
                skip_parens += {"(": 1, ")": -1}.get(text, 0)
        elif kind == "name" and braces and text == "__name__" and following == "=" and i + 2 < len(toks):
            found.add(toks[i + 2][1][1:-1])  # {__name__="x"}
        elif kind == "name" and not (braces or brackets or skip_parens):
            if text in LABEL_LIST_KEYWORDS and following == "(":
                skip_parens, i = 1, i + 2  # the label list: its names are labels
                continue
            if text not in KEYWORDS and following != "(":
                found.add(text)
        i += 1
    return found


def variables_used(expr: str) -> set[str]:
    """The Grafana variables an expression refers to (`$x`, `${x}`, `${x:fmt}`, `[[x]]`), by name."""
    return {next(name for name in match.groups() if name) for match in _VARIABLE.finditer(expr)}


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too (rows themselves included)."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def variable_query(variable: dict[str, Any]) -> str | None:
    """The PromQL inside a query variable's `label_values(EXPR, label)` or `query_result(EXPR)`, if any."""
    query = variable.get("query")
    if isinstance(query, dict):
        query = query.get("query")
    if variable.get("type") != "query" or not isinstance(query, str):
        return None
    match = re.fullmatch(r"\s*(label_values|query_result)\((.*)\)\s*", query, re.S)
    if not match:
        return query
    inner = match.group(2)
    if match.group(1) == "query_result":
        return inner
    depth, cut = 0, None
    for index, char in enumerate(inner):  # label_values(label) has no metric; (EXPR, label) cuts at the last comma
        depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            cut = index
    return inner[:cut] if cut is not None else None


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    found = [(f"panel {p.get('title')!r} {t.get('refId')}", t["expr"])
             for p in panels(dashboard) for t in p.get("targets", []) if t.get("expr")]
    for variable in dashboard.get("templating", {}).get("list", []):
        expr = variable_query(variable)
        if expr:
            found.append((f"variable {variable['name']!r}", expr))
    return found


def series_names(exposition: str) -> set[str]:
    """The names of the samples a scrape carries (`x_total`, `x_created`, `y_bucket`, ...): what Prometheus stores."""
    return {sample.name for family in text_string_to_metric_families(exposition) for sample in family.samples}
