"""JSON Lines records as kuberl writes them: plain JSON (numpy values converted, NaN as null)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)


def _json_default(value: Any) -> Any:
    # numpy scalars and arrays, and anything else with .item()/.tolist(), become plain JSON.
    for attr in ("tolist", "item"):
        if hasattr(value, attr):
            return getattr(value, attr)()
    return str(value)


def _clean(value: Any) -> Any:
    # JSON has no NaN/Infinity; write null so every reader can parse the line.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def dumps_record(record: Mapping[str, Any]) -> str:
    """One JSON Lines line (no newline) for a result or episode record."""
    try:
        return json.dumps(record, default=_json_default, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: rare, so only then the slower clean pass
        plain = json.loads(json.dumps(record, default=_json_default))
        return json.dumps(_clean(plain), separators=(",", ":"), allow_nan=False)


def parse_jsonl(data: bytes) -> list[dict[str, Any]]:
    """The records of a JSON Lines text; a torn or unparsable line (a crash mid-write) is skipped."""
    records = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            log.warning("skipping an unparsable JSON Lines record")
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
