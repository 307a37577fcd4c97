"""Generate docs/manifest.md, the field reference, from the same API types as the CRD."""

from __future__ import annotations

import sys
import types as pytypes
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kuberl.api.algorithms import HYPERPARAMS
from kuberl.api.defaults import reference_sections as defaults_reference_sections
from kuberl.api.types import RLExperimentSpec

_DOC_FILE = Path("docs/manifest.md")


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *typing.get_args(annotation)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, pytypes.UnionType):
        names = [_type_name(a) for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(dict.fromkeys(names))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (list, dict):
        return "list" if origin is list else "map"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return getattr(annotation, "__name__", str(annotation))


def _constraints(info: FieldInfo) -> str:
    parts = []
    for meta in info.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.get_default(call_default_factory=True, validated_data={})
        return "" if isinstance(value, BaseModel) else f"`{value}`"
    return "" if info.default is None else f"`{str(info.default).lower() if isinstance(info.default, bool) else info.default}`"


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a list's items (`list[PolicySpec]`, `list[X] | None`), if they are objects."""
    for candidate in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(candidate) is list:
            return _nested_model(typing.get_args(candidate)[0])
    return None


def description_of(model: type[BaseModel], name: str) -> str:
    """A field's description; a subclass that overrides a field only to change its default or bounds
    (PPOParams.lr) keeps the meaning its nearest base gave it."""
    for cls in model.__mro__:
        info: FieldInfo | None = cls.model_fields.get(name) \
            if isinstance(cls, type) and issubclass(cls, BaseModel) else None
        if info is not None and info.description:
            return info.description
    return ""


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = []
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}" if prefix else (info.alias or name)
        description = description_of(model, name).replace("|", "\\|")
        rows.append(f"| `{path}` | {_type_name(info.annotation)} | {_default(info)} | {_constraints(info)} | {description} |")
        items = _list_item_model(info.annotation)
        nested = None if items is not None else _nested_model(info.annotation)
        if items is not None:
            rows.extend(_rows(items, f"{path}[]"))
        elif nested is not None:
            rows.extend(_rows(nested, path))
    return rows


def empty_meanings(reference: str) -> list[str]:
    """The fields of a generated reference whose meaning column is empty."""
    return [line.split("|")[1].strip() for line in reference.splitlines()
            if line.startswith("| `") and line.rstrip().endswith("|  |")]


def render_reference() -> str:
    header = "| field | type | default | bounds | meaning |\n|---|---|---|---|---|"
    out = [
        "# RLExperiment manifest reference",
        "",
        "Generated from `src/kuberl/api/types.py`, `hyperparams.py` and `algorithms.py` by `make crds`; do not edit.",
        "The CRD (`crds/rlexperiment.yaml`) is generated from the same types.",
        "",
        "## spec",
        "",
        header,
        *_rows(RLExperimentSpec, "spec"),
    ]
    for algorithm, params in HYPERPARAMS.items():
        out += ["", f"## spec.config for `{algorithm}`", "", header, *_rows(params, "spec.config")]
    out += ["", *defaults_reference_sections()]
    return "\n".join(out) + "\n"


def write_generated_doc(doc_file: str | Path, text: str, argv: list[str] | None = None) -> int:
    """A generator's main: write `text` to `doc_file` under the root given as the first argument (default: here)."""
    argv = sys.argv[1:] if argv is None else argv
    path = (Path(argv[0]) if argv else Path(".")) / doc_file
    path.write_text(text)
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_generated_doc(_DOC_FILE, render_reference(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
