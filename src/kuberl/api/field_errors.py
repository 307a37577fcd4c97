"""Errors a user must fix, each naming its field: FieldError and ManifestError, and pydantic's validation
errors put in words (the value given where its type or form is wrong, a did-you-mean for an unknown field)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kuberl.api.base import manifest_names
from kuberl.api.storage_uri import ACCEPTED as STORAGE_ACCEPTED
from kuberl.api.storage_uri import storage_uri_problem
from kuberl.api.types import (
    CLASS_PATH_PATTERN,
    CPU_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    ENDPOINT_PATTERN,
    IMAGE_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MEMORY_PATTERN,
    POLICY_NAME_PATTERN,
    STORAGE_URI_PATTERN,
    WRAPPER_NAME_PATTERN,
)

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ManifestError(ValueError):
    """A manifest a user must fix; each problem names the field."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def fail(path: str, message: str) -> ManifestError:
    return ManifestError([FieldError(path, message)])


def nearest(word: str, candidates: list[str]) -> str | None:
    """The candidate a misspelt `word` most likely means, or None when none is close."""
    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return match[0] if match else None


def suggestion(word: str, candidates: list[str]) -> str:
    """" (did you mean 'x'?)" for the nearest candidate, or nothing."""
    match = nearest(word, candidates)
    return f" (did you mean {match!r}?)" if match else ""


def _unknown_field_hint(key: str, model: type[BaseModel]) -> str:
    """A Python name (envs_per_worker) is answered with its manifest name exactly; anything else with the
    nearest manifest name."""
    field = model.model_fields.get(key)
    if field is not None and field.alias and field.alias != key:
        return f" (did you mean {field.alias!r}?)"
    return suggestion(key, manifest_names(model))


def validate_manifest_model(model: type[ModelT], data: Any) -> ModelT:
    """`data` (a manifest's mapping) as `model`, read by the manifest's camelCase names only: the CRD knows no
    other, so a Python name (envs_per_worker) that passed here would be pruned by the API server unread."""
    return model.model_validate(data, by_alias=True, by_name=False)


def _resolve_model(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that a location's parent refers to, for did-you-mean hints."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int):  # an item of a list of models: the list's field already named its model
            continue
        if model is None:
            return None
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        model = model_in(field.annotation)
    return model


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, optional, or as the items of a list."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        if getattr(candidate, "__origin__", None) is list:
            return model_in(candidate.__args__[0])
    return None


_MESSAGES: dict[str, Callable[[dict[str, Any]], str]] = {
    "greater_than_equal": lambda ctx: f"must be >= {ctx['ge']}",
    "greater_than": lambda ctx: f"must be > {ctx['gt']}",
    "less_than_equal": lambda ctx: f"must be <= {ctx['le']}",
    "less_than": lambda ctx: f"must be < {ctx['lt']}",
    "missing": lambda ctx: "required field is missing",
    "string_too_short": lambda ctx: f"must be at least {ctx['min_length']} characters",
    "string_too_long": lambda ctx: f"must be at most {ctx['max_length']} characters",
    "too_short": lambda ctx: f"must have at least {ctx['min_length']} items",
    "too_long": lambda ctx: f"must have at most {ctx['max_length']} items",
    "int_type": lambda ctx: "must be an integer",
    "int_parsing": lambda ctx: "must be an integer",
    "int_from_float": lambda ctx: "must be a whole number",
    "float_type": lambda ctx: "must be a number",
    "float_parsing": lambda ctx: "must be a number",
    "bool_type": lambda ctx: "must be true or false",
    "bool_parsing": lambda ctx: "must be true or false",
    "string_type": lambda ctx: "must be a string",
    "dict_type": lambda ctx: "must be a mapping",
    "model_type": lambda ctx: "must be a mapping",
    "model_attributes_type": lambda ctx: "must be a mapping",
    "list_type": lambda ctx: "must be a list",
    "literal_error": lambda ctx: f"must be one of {ctx['expected']}",
    "value_error": lambda ctx: str(ctx.get("error", "invalid value")),
}

# Errors of a value's type: the message shows the value, since YAML may have read it otherwise than meant.
_TYPE_ERRORS = frozenset({"int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
                          "bool_type", "bool_parsing", "string_type", "dict_type", "model_type",
                          "model_attributes_type", "list_type"})

# What each pattern of the schema accepts, in words (spec.storage.uri's: kuberl.api.storage_uri).
_ENDS = "starting and ending with a letter or digit"
_PATTERN_WORDS: dict[str, str] = {
    DNS_SUBDOMAIN_PATTERN: f"must be lowercase letters, digits, '-' and '.', {_ENDS}",
    ENDPOINT_PATTERN: "must be an http:// or https:// URL such as http://minio:9000",
    CPU_PATTERN: "must be a number of CPUs such as 2, 0.5 or 500m",
    MEMORY_PATTERN: "must be an amount of memory such as 512Mi, 4Gi or 1000000 (bytes)",
    LABEL_VALUE_PATTERN: f"must be letters, digits, '-', '_' and '.', {_ENDS}",
    f"({LABEL_KEY_PATTERN})|^$": "must be a label key: letters, digits, '-', '_' and '.', after an optional "
                                 "DNS prefix and '/' (such as example.com/team)",
    IMAGE_PATTERN: "must have no whitespace",
    CLASS_PATH_PATTERN: "must be an import path, package.module:Class",
    WRAPPER_NAME_PATTERN: "must be an import path such as gymnasium.wrappers:ClipAction",
    POLICY_NAME_PATTERN: f"must be lowercase letters, digits, '-' and '_', {_ENDS}",
    r"^[-._a-zA-Z0-9]+$": "must be letters, digits, '-', '.' and '_'",
}

_UNION_MEMBERS = ("int", "str", "float", "bool", "constrained-int", "constrained-str", "constrained-float")


def shortened(name: str, limit: int = 64) -> str:
    """A field name as an error shows it: a 1 MB key is not echoed back."""
    return name if len(name) <= limit else f"{name[:limit]}...({len(name)} characters)"


def pydantic_errors(exc: ValidationError, root: type[BaseModel], prefix: str) -> list[FieldError]:
    by_path: dict[str, tuple[str, dict[str, Any]]] = {}
    for err in exc.errors():
        # A union (int | str) reports once per member: keep the member that matches the input's type.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in _UNION_MEMBERS))
        parts = [prefix, *(f"[{p}]" if isinstance(p, int) else shortened(str(p)) for p in loc)]
        path = ".".join(p for p in parts if p).replace(".[", "[")
        previous = by_path.get(path)
        if previous is not None and not (
            isinstance(err.get("input"), str) and err["type"].startswith("string_")
        ):
            continue
        by_path[path] = (err["type"], {**err, "loc": loc})
    errors = []
    for path, (kind, details) in by_path.items():
        loc = details["loc"]
        if kind == "extra_forbidden":
            parent = _resolve_model(root, loc[:-1])
            hint = _unknown_field_hint(str(loc[-1]), parent) if parent else ""
            message = f"unknown field{hint}"
        else:
            message = _message(kind, details)
        errors.append(FieldError(path, message))
    return errors


def _message(kind: str, details: dict[str, Any]) -> str:
    """A pydantic error in words: with the value given where its type or form is wrong."""
    value = details.get("input")
    if kind == "string_pattern_mismatch":
        return _pattern_message(str((details.get("ctx") or {}).get("pattern", "")), value)
    if kind in ("int_type", "int_from_float") and isinstance(value, float):
        if math.isfinite(value) and value.is_integer():  # 1e5 or 4.0: YAML made it a float
            return (f"must be a whole number written without a decimal point or exponent, got {value!r} "
                    f"(write {int(value)})")
        return f"must be a whole number, got {value!r}"
    message = _MESSAGES[kind](details.get("ctx") or {}) if kind in _MESSAGES else str(details["msg"])
    return f"{message}, got {_shown(value)}" if kind in _TYPE_ERRORS else message


def _pattern_message(pattern: str, value: Any) -> str:
    if pattern == STORAGE_URI_PATTERN and isinstance(value, str):
        problem = storage_uri_problem(value, plain_path=False)
        return problem or f"must be {STORAGE_ACCEPTED}, got {_shown(value)}"
    words = _PATTERN_WORDS.get(pattern, f"must match the pattern {pattern}")
    return f"{words}, got {_shown(value)}"


def _shown(value: Any) -> str:
    """A value as an error quotes it: as YAML writes it, a string quoted (saying so where it looks like a
    number, which quotes in the YAML make a string), a long one cut short."""
    if isinstance(value, str):
        quoted = repr(shortened(value))
        return f"the string {quoted}" if _looks_like_number(value) else quoted
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return shortened(repr(value))


def _looks_like_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
