"""What `kuberl list` and `kuberl status` print: pure functions of the objects the API server returned.

The tables' columns are the CRDs' printer columns (kuberl.api.crd, kuberl.api.sweep_crd), so `kuberl list`
says what `kubectl get rlx,rls` says: a table per kind, names qualified by their kind when both are listed.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any

from kuberl.api.types import Phase
from kuberl.api.yaml_text import dump_yaml

EVENTS_SHOWN = 20


@functools.cache
def printer_columns(kind: str = "RLExperiment") -> list[dict[str, Any]]:
    """The CRD's additionalPrinterColumns of `kind` (RLExperiment or RLSweep)."""
    if kind == "RLSweep":
        from kuberl.api.sweep_crd import build_sweep_crd as build
    else:
        from kuberl.api.crd import build_crd as build

    return list(build()["spec"]["versions"][0]["additionalPrinterColumns"])


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


def resource_table(items: list[dict[str, Any]], now: datetime.datetime, *, kind: str = "RLExperiment",
                   all_namespaces: bool = False, wide: bool = False, prefix: str = "") -> str:
    """`kuberl list`'s table of one kind: NAME (after `prefix`, such as `rlsweep.kuberl.io/`) and the kind's
    printer columns (with -A NAMESPACE first, with -o wide all of them)."""
    columns = [c for c in printer_columns(kind) if wide or not c.get("priority")]
    header = (["NAMESPACE"] if all_namespaces else []) + ["NAME"] + [c["name"].upper() for c in columns]
    rows = [header]
    for item in sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])):
        meta = item["metadata"]
        row = ([meta.get("namespace", "")] if all_namespaces else []) + [prefix + meta["name"]]
        row += [_cell(json_path(item, c["jsonPath"]), c["type"], now) for c in columns]
        rows.append(row)
    return table(rows)


def experiments_table(items: list[dict[str, Any]], now: datetime.datetime, *, all_namespaces: bool = False,
                      wide: bool = False) -> str:
    """`kuberl list experiments`: as `kubectl get rlx`."""
    return resource_table(items, now, all_namespaces=all_namespaces, wide=wide)


def sweeps_table(items: list[dict[str, Any]], now: datetime.datetime, *, all_namespaces: bool = False,
                 wide: bool = False) -> str:
    """`kuberl list sweeps`: as `kubectl get rls`."""
    return resource_table(items, now, kind="RLSweep", all_namespaces=all_namespaces, wide=wide)


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
    return "\n".join(lines + conditions_and_events(status, doc["events"], now))


def conditions_and_events(status: dict[str, Any], shown: list[dict[str, Any]], now: datetime.datetime) -> list[str]:
    """The closing sections of `kuberl status`, for either kind: the conditions and the recent events."""
    lines = []
    conditions = status.get("conditions") or []
    lines.append("Conditions:" if conditions else "Conditions:  none")
    if conditions:
        rows = [["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]]
        rows += [[c.get("type", ""), c.get("status", ""), c.get("reason", ""),
                  age(c.get("lastTransitionTime"), now), c.get("message", "")] for c in conditions]
        lines += ["  " + line for line in table(rows).splitlines()]
    lines.append("Events:" if shown else "Events:      none")
    if shown:
        rows = [["TYPE", "REASON", "AGE", "MESSAGE"]]
        rows += [[e["type"], e["reason"], age(e["lastTimestamp"], now) + (f" (x{e['count']})" if e["count"] > 1 else ""),
                  e["message"]] for e in shown]
        lines += ["  " + line for line in table(rows).splitlines()]
    return lines


# -- sweeps ---------------------------------------------------------------------------------------------

def sweep_status_document(obj: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """`kuberl status sweep/NAME -o json|yaml`: the sweep's identity and search, its status as stored (every
    trial included), its recent events."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    template = spec.get("template") or {}
    objective = spec.get("objective") or {}
    return {
        "kind": "RLSweep",
        "name": meta.get("name"), "namespace": meta.get("namespace"),
        "creationTimestamp": meta.get("creationTimestamp"),
        "algorithm": template.get("algorithm"), "env": (template.get("env") or {}).get("id"),
        "search": (spec.get("search") or {}).get("algorithm", "tpe"),
        "objective": {"metric": objective.get("metric", "episodeReturnMean"),
                      "goal": objective.get("goal", "maximize")},
        "parameters": [p.get("path") for p in spec.get("parameters") or []],
        "maxTrials": spec.get("maxTrials", 10),
        "suspend": bool(spec.get("suspend")),
        "status": obj.get("status") or {},
        "events": recent_events(events),
    }


def trial_counts_text(status: dict[str, Any], max_trials: Any = None) -> str:
    """`3 succeeded, 1 running, 0 pruned, 0 failed of 10`."""
    counts = ", ".join(f"{status.get(key) or 0} {word}" for key, word in (
        ("trialsSucceeded", "succeeded"), ("trialsRunning", "running"), ("trialsPruned", "pruned"),
        ("trialsFailed", "failed")))
    return counts + (f" of {max_trials}" if max_trials is not None else "")


def _params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{path}={_number(value)}" for path, value in params.items())


def best_text(best: dict[str, Any] | None, metric: str) -> str:
    """The best trial in one line, or "none yet"."""
    if not best:
        return "none yet"
    params = _params_text(best.get("params") or {})
    return (f"{best.get('name')} (trial {best.get('number')}): {metric} {_number(best.get('value'))}"
            + (f" with {params}" if params else ""))


def sweep_progress_line(name: str, status: dict[str, Any], metric: str) -> str:
    """What `kuberl submit --wait` prints each time a sweep moves on."""
    best = status.get("best")
    tail = f", best {_number(best['value'])} ({best.get('name')})" if best and best.get("value") is not None else ""
    return f"{name}: {status.get('phase') or Phase.PENDING.value}, trials {trial_counts_text(status)}{tail}"


def trials_table(trials: list[dict[str, Any]], paths: list[str], best: int | None = None) -> str:
    """Every trial: its number (* the best), run, state, value, each parameter's value and its message."""
    rows = [["TRIAL", "NAME", "STATE", "VALUE", *paths, "MESSAGE"]]  # paths as written: camelCase
    for trial in trials:
        params = trial.get("params") or {}
        value = trial.get("value")
        rows.append([f"{trial.get('number')}{'*' if trial.get('number') == best else ''}", str(trial.get("name", "")),
                     str(trial.get("state", "")), "" if value is None else _number(value),
                     *("" if params.get(p) is None else _number(params[p]) for p in paths),
                     trial.get("message") or ""])
    return table(rows)


def describe_sweep(obj: dict[str, Any], events: list[dict[str, Any]], now: datetime.datetime) -> str:
    """`kuberl status sweep/NAME`: phase, trial counts, the best trial, every trial, conditions and events."""
    doc = sweep_status_document(obj, events)
    status, objective = doc["status"], doc["objective"]
    phase = status.get("phase") or Phase.PENDING.value
    if doc["suspend"] and status.get("phase") != Phase.SUSPENDED:
        phase += ", suspending"
    if status.get("pbtRound") is not None:
        phase += f" (pbt round {status['pbtRound']})"
    lines = [
        f"Name:        {doc['name']}",
        f"Namespace:   {doc['namespace']}",
        f"Kind:        RLSweep ({doc['search']} search over {doc['algorithm']} on {doc['env']})",
        f"Objective:   {objective['goal']} {objective['metric']}",
        f"Phase:       {phase}",
        f"Trials:      {trial_counts_text(status, doc['maxTrials'])}",
        f"Best:        {best_text(status.get('best'), objective['metric'])}",
        f"Age:         {age(doc['creationTimestamp'], now)}",
    ]
    if status.get("message"):
        lines.append(f"Message:     {status['message']}")
    trials = status.get("trials") or []
    lines.append("All trials:" if trials else "All trials:  none yet")
    if trials:
        best = (status.get("best") or {}).get("number")
        lines += ["  " + line for line in trials_table(trials, doc["parameters"], best).splitlines()]
    return "\n".join(lines + conditions_and_events(status, doc["events"], now))


def render(document: Any, output: str) -> str:
    """A document as `-o json` or `-o yaml` prints it."""
    if output == "json":
        return json.dumps(document, indent=2, sort_keys=False)
    return dump_yaml(document, sort_keys=False, width=120).rstrip("\n")
