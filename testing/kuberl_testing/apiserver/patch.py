"""Patch semantics: RFC 7386 merge patch and RFC 6902 JSON patch, with the API server's errors."""

from __future__ import annotations

import copy
from typing import Any

from kuberl_testing.apiserver.errors import ApiError


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key; lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], op: dict[str, Any]) -> Any:
    node = doc
    for part in parts:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, "Invalid", f"JSON patch {op['op']}: path {op.get('path')!r} not found") from None
    return node


def _get(doc: Any, path: str, op: dict[str, Any]) -> Any:
    return _walk(doc, _pointer(path), op)


def _remove(doc: Any, path: str, op: dict[str, Any]) -> Any:
    parts = _pointer(path)
    parent = _walk(doc, parts[:-1], op)
    try:
        return parent.pop(int(parts[-1]) if isinstance(parent, list) else parts[-1])
    except (KeyError, IndexError, ValueError):
        raise ApiError(422, "Invalid", f"JSON patch {op['op']}: path {path!r} not found") from None


def _add(doc: Any, path: str, value: Any, op: dict[str, Any], *, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if replace:
            parent[index] = copy.deepcopy(value)
        else:
            parent.insert(index, copy.deepcopy(value))
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, "Invalid", f"JSON patch replace: path {path!r} not found")
        parent[last] = copy.deepcopy(value)
    else:
        raise ApiError(422, "Invalid", f"JSON patch {op['op']}: parent of {path!r} is not a container")
    return doc


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 JSON patch; a failed `test` is 422 Invalid, as the API server answers."""
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "test":
            if _get(doc, path, op) != op.get("value"):
                raise ApiError(422, "Invalid", f"JSON patch test failed at {path!r}")
        elif kind == "remove":
            _remove(doc, path, op)
        elif kind in ("add", "replace"):
            doc = _add(doc, path, op.get("value"), op, replace=kind == "replace")
        elif kind in ("move", "copy"):
            value = _get(doc, op["from"], op)
            if kind == "move":
                _remove(doc, op["from"], op)
            doc = _add(doc, path, copy.deepcopy(value), op)
        else:
            raise ApiError(422, "Invalid", f"unknown JSON patch op {kind!r}")
    return doc
