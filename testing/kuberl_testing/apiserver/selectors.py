"""Label and field selectors, in the syntax of `?labelSelector=` and `?fieldSelector=`."""

from __future__ import annotations

import re
from typing import Any

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Kubernetes label selector syntax: k=v, k==v, k!=v, k, !k, k in (a,b), k notin (a,b)."""
    for term in _split_terms(selector):
        if match := _SET_TERM.match(term):
            key, op, values = match.group(1), match.group(2), {v.strip() for v in match.group(3).split(",")}
            ok = labels.get(key) in values if op == "in" else labels.get(key) not in values
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            ok = labels.get(key) != value
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            ok = labels.get(key) == value
        elif term.startswith("!"):
            ok = term[1:].strip() not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def field_selector_matches(selector: str, obj: dict[str, Any]) -> bool:
    """Field selector syntax: path=value, path==value, path!=value (dotted paths into the object)."""
    for term in _split_terms(selector):
        negate = "!=" in term
        path, value = (s.strip() for s in term.replace("==", "=").replace("!=", "=").split("=", 1))
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        actual = "" if node is None else str(node)
        if (actual == value) == negate:
            return False
    return True


def object_matches(obj: dict[str, Any], namespace: str | None, labels: str | None, fields: str | None) -> bool:
    """Whether a stored object is in `namespace` (None: any) and matches both selectors (None: any)."""
    meta = obj["metadata"]
    return (namespace is None or meta.get("namespace", "") == namespace) \
        and (not labels or label_selector_matches(labels, meta.get("labels") or {})) \
        and (not fields or field_selector_matches(fields, obj))
