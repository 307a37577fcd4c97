"""The base of every API model: strict, camelCase, and dumped the way a manifest is written."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


def manifest_names(model: type[BaseModel], prefix: str = "") -> list[str]:
    """The names a manifest gives `model`'s fields (camelCase aliases), in field order; `prefix`: only the fields
    whose Python name starts with it."""
    return [info.alias or name for name, info in model.model_fields.items() if name.startswith(prefix)]


def at_default(model: BaseModel, name: str) -> bool:
    """Whether the field `name` of `model` holds its default value."""
    info = type(model).model_fields[name]
    return bool(getattr(model, name) == info.get_default(call_default_factory=True, validated_data={}))


class StrictModel(BaseModel):
    """Strict camelCase model: unknown fields are errors (typos must not pass silently), and no value is
    coerced ("yes" or 1 for true, true or "5" for an integer) that the CRD schema would refuse."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_assignment=True,
        strict=True,
    )

    def to_manifest(self, *, exclude_unset: bool = False) -> dict[str, Any]:
        """The manifest form: camelCase keys, unset optional fields left out. exclude_unset=True leaves out
        every field the user did not set (in the document or by assignment), so that what kuberl defaults from
        what is unset (the task-kind defaults, the operator's pod sizes) still sees it unset; the default
        writes every value."""
        if not exclude_unset:
            return self.model_dump(by_alias=True, exclude_none=True, mode="json")
        model = self.model_copy(deep=True)
        _mark_changed(model)
        return model.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, mode="json")


def _mark_changed(model: BaseModel) -> None:
    """Count as set every field whose value differs from its default: pydantic records an assignment to a
    nested model's field (spec.rollouts.workers = 4) in that model only, so its parent would leave it out."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, BaseModel):
                _mark_changed(child)
        if name not in model.model_fields_set and not info.is_required() and not at_default(model, name):
            model.model_fields_set.add(name)
