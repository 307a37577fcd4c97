"""The base of every API model: strict, camelCase, and dumped the way a manifest is written."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


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

    def to_manifest(self) -> dict[str, Any]:
        """The manifest form: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
