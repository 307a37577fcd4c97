"""What a sampling policy is configured with between samples (its `configure`): the settings an algorithm
sends its rollout workers, its replay-shard workers and its evaluation actors.

DQN and Ape-X set an epsilon (`QPolicy`), SAC whether to act uniformly until learning starts
(`SACSamplingPolicy`). A field left None is not sent: the policy keeps what it has.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class PolicySettings:
    epsilon: float | None = None
    uniform: bool | None = None

    def __bool__(self) -> bool:
        """Whether any field is set: a policy is configured with something (not every policy has `configure`)."""
        return bool(self.kwargs())

    def kwargs(self) -> dict[str, float | bool]:
        """The fields that are set, in field order: the keyword arguments of the policy's `configure`."""
        return {f.name: value for f in fields(self) if (value := getattr(self, f.name)) is not None}

    def changed_from(self, current: PolicySettings) -> PolicySettings:
        """The fields set here whose value differs from `current`'s; the rest unset."""
        changed: dict[str, Any] = {name: value for name, value in self.kwargs().items()
                                   if getattr(current, name) != value}
        return PolicySettings(**changed)

    def updated(self, newer: PolicySettings) -> PolicySettings:
        """These settings with `newer`'s set fields over them."""
        newer_fields: dict[str, Any] = newer.kwargs()
        return replace(self, **newer_fields)
