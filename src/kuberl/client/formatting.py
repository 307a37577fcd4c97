"""What `kuberl list` and `kuberl status` print: pure functions of the objects the API server returned.

The table's columns are the CRD's printer columns (kuberl.api.crd), so `kuberl list` and
`kubectl get rlx` say the same thing.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any

import yaml

from kuberl.api.types import Phase

EVENTS_SHOWN = 20


@functools.cache
def printer_columns() -> list[dict[str, Any]]:
    from kuberl.api.crd import build_crd

    return list(build_crd()["spec"]["versions"][0]["additionalPrinterColumns"])


def json_path(obj: dict[str, Any], path: str) -> Any:
    """The value at a simple JSONPath (`.status.phase`); None where any step is missing."""
    node: Any = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def parse_time(stamp: str | None) -> datetime.datetime | None:
    if not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(stamp: str | None, now: datetime.datetime) -> str:
    """kubectl's short duration (`45s`, `3m12s`, `12m`, `5h3m`, `20h`, `3d4h`, `40d`); `<unknown>` without a time."""
    then = parse_time(stamp)
    if then is None:
        return "<unknown>"
    seconds = max(0, int((now - then).total_seconds()))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def _cell(value: Any, kind: str, now: datetime.datetime) -> str:
    if value is None or value == "":
        return ""
    if kind == "date":
        return age(value, now)
    if kind == "number" and isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table(rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl's layout)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def experiments_table(items: list[dict[str, Any]], now: datetime.datetime, *, all_namespaces: bool = False,
                      wide: bool = False) -> str:
    """`kuberl list`: NAME and the printer columns (with -A NAMESPACE first, with -o wide all of them)."""
    columns = [c for c in printer_columns() if wide or not c.get("priority")]
    header = (["NAMESPACE"] if all_namespaces else []) + ["NAME"] + [c["name"].upper() for c in columns]
    rows = [header]
    for item in sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])):
        meta = item["metadata"]
        row = ([meta.get("namespace", "")] if all_namespaces else []) + [meta["name"]]
        row += [_cell(json_path(item, c["jsonPath"]), c["type"], now) for c in columns]
        rows.append(row)
    return table(rows)


def event_time(event: dict[str, Any]) -> str:
    return (event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get(
        "creationTimestamp") or "")


def recent_events(events: list[dict[str, Any]], limit: int = EVENTS_SHOWN) -> list[dict[str, Any]]:
    """The newest `limit` events, oldest first, each as {type, reason, message, count, lastTimestamp}."""
    ordered = sorted(events, key=event_time)[-limit:]
    return [{"type": e.get("type") or "", "reason": e.get("reason") or "", "message": e.get("message") or "",
             "count": e.get("count") or 1, "lastTimestamp": event_time(e)} for e in ordered]


def status_document(obj: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """`kuberl status -o json|yaml`: the experiment's identity, its status as stored, its recent events."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return {
        "name": meta.get("name"), "namespace": meta.get("namespace"),
        "creationTimestamp": meta.get("creationTimestamp"),
        "algorithm": spec.get("algorithm"), "env": (spec.get("env") or {}).get("id"),
        "suspend": bool(spec.get("suspend")),
        "status": obj.get("status") or {},
        "events": recent_events(events),
    }


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def progress_text(status: dict[str, Any]) -> str:
    """The experiment's figures so far: iteration, timesteps, return, evaluation (or "none yet")."""
    parts = []
    if status.get("iteration") is not None:
        parts.append(f"iteration {status['iteration']}")
    if status.get("timesteps") is not None:
        parts.append(f"{_number(status['timesteps'])} timesteps")
    if status.get("episodeReturnMean") is not None:
        parts.append(f"return {_number(status['episodeReturnMean'])}")
    if status.get("evaluationReturnMean") is not None:
        parts.append(f"evaluation {_number(status['evaluationReturnMean'])}")
    return ", ".join(parts) or "none yet"


def describe(obj: dict[str, Any], events: list[dict[str, Any]], now: datetime.datetime) -> str:
    """`kuberl status NAME`: phase, conditions, progress, last checkpoint, recent events."""
    doc = status_document(obj, events)
    status = doc["status"]
    phase = status.get("phase") or Phase.PENDING.value
    if status.get("attempt"):
        phase += f" (attempt {status['attempt']})"
    if doc["suspend"] and status.get("phase") != Phase.SUSPENDED:
        phase += ", suspending"
    lines = [
        f"Name:        {doc['name']}",
        f"Namespace:   {doc['namespace']}",
        f"Algorithm:   {doc['algorithm']} on {doc['env']}",
        f"Phase:       {phase}",
        f"Progress:    {progress_text(status)}",
        f"Checkpoint:  {status.get('lastCheckpoint') or 'none yet'}",
        f"Age:         {age(doc['creationTimestamp'], now)}",
    ]
    if status.get("workers") is not None:
        lines.append(f"Workers:     {status['workers']} ready")
    if status.get("message"):
        lines.append(f"Message:     {status['message']}")
    failure = status.get("lastFailure")
    if failure:
        lines.append(f"Last failure: attempt {failure.get('attempt')}: {failure.get('reason')}: {failure.get('message')}")
    conditions = status.get("conditions") or []
    lines.append("Conditions:" if conditions else "Conditions:  none")
    if conditions:
        rows = [["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]]
        rows += [[c.get("type", ""), c.get("status", ""), c.get("reason", ""),
                  age(c.get("lastTransitionTime"), now), c.get("message", "")] for c in conditions]
        lines += ["  " + line for line in table(rows).splitlines()]
    shown = doc["events"]
    lines.append("Events:" if shown else "Events:      none")
    if shown:
        rows = [["TYPE", "REASON", "AGE", "MESSAGE"]]
        rows += [[e["type"], e["reason"], age(e["lastTimestamp"], now) + (f" (x{e['count']})" if e["count"] > 1 else ""),
                  e["message"]] for e in shown]
        lines += ["  " + line for line in table(rows).splitlines()]
    return "\n".join(lines)


def render(document: Any, output: str) -> str:
    """A document as `-o json` or `-o yaml` prints it."""
    if output == "json":
        return json.dumps(document, indent=2, sort_keys=False)
    return yaml.safe_dump(document, sort_keys=False, width=120).rstrip("\n")
