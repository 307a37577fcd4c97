"""Importing a class a manifest names as "package.module:Class" (an env, callbacks), with one set of
messages for whatever is wrong with it."""

from __future__ import annotations

import importlib


class UserClassNotFound(ValueError):
    """The path names no importable subclass of the expected base; the message says why."""


def import_user_class(path: str, base: type, base_name: str) -> type:
    """Import "package.module:Class" and check that it subclasses `base` (called `base_name` in messages)."""
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise UserClassNotFound(f"{path!r}: expected package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserClassNotFound(f"{path!r}: cannot import module {module_name!r} ({exc})") from None
    found = getattr(module, class_name, None)
    if found is None:
        raise UserClassNotFound(f"{path!r}: module {module_name!r} has no attribute {class_name!r}")
    if not isinstance(found, type) or not issubclass(found, base):
        raise UserClassNotFound(f"{path!r}: {class_name} is not a {base_name} subclass")
    return found
