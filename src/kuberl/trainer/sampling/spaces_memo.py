"""The spaces of the envs this process has built, kept by what built them.

At a run's start the env checks, the task-kind defaults, Ape-X's learner measurement, the replay's memory
budget and the algorithm each need the env's spaces; each used to build the env again (an ALE game, a MuJoCo
model, a user's env that may load assets). An entry is keyed by the settings (id, config, preprocessing,
wrappers) and is used only while the same object builds them: the id's registered spec, the env class, the
multi-agent module or factory, so an id registered again, or a class defined again, builds again. A failed build
keeps nothing: the next call raises again, with the same message.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

KEPT = 32  # distinct env settings; a process rarely sees more than one or two
_kept: OrderedDict[str, tuple[object, Any]] = OrderedDict()


def remembered(settings: Any, builder: Callable[[], object], build: Callable[[], T]) -> T:
    """`build()`'s result, kept for `settings` (JSON-able, objects by their repr) while `builder()` gives the same
    object. Where `builder()` raises or the settings have no key, `build()` runs uncached and raises what it
    raises."""
    try:
        key = json.dumps(settings, sort_keys=True, default=repr)
        maker = builder()
    except Exception:  # noqa: BLE001 - the build itself reports what is wrong with the env
        return build()
    found = _kept.get(key)
    if found is not None and found[0] is maker:
        _kept.move_to_end(key)
        return found[1]
    value = build()
    _kept[key] = (maker, value)  # holding the maker keeps its identity from being reused by another object
    while len(_kept) > KEPT:
        _kept.popitem(last=False)
    return value


def forget_all() -> None:
    """Drop every kept entry (tests that change an env's code under the same names)."""
    _kept.clear()


__all__ = ["KEPT", "forget_all", "remembered"]
