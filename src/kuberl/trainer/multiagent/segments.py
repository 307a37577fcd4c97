"""One policy's experience of a fragment as the learners' [T, N] arrays.

A rollout worker records each agent's steps as segments: the rows of one agent between its first step in the
fragment (or its arrival) and its last (its termination or truncation, or the fragment's end). `pack` lays the
segments of one policy out as columns of [T, M] arrays, several segments one after another in a column where
they do not overlap; rows no segment fills have `valid` False. A segment that ends before the fragment does
always ends terminated or truncated, so GAE and V-trace never carry a trace from one agent into the next one in
its column, and an agent that left is cut where it left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kuberl.trainer.sampling.rollout_worker import stored_dtype


@dataclass
class Segment:
    """The consecutive steps of one agent in one env, from fragment row `start`."""

    agent: str
    env: int
    start: int
    obs: list[np.ndarray] = field(default_factory=list)
    next_obs: list[np.ndarray] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    extras: dict[str, list[Any]] = field(default_factory=dict)
    rewards: list[float] = field(default_factory=list)
    terminateds: list[bool] = field(default_factory=list)
    truncateds: list[bool] = field(default_factory=list)

    def add(self, obs: np.ndarray, action: Any, extras: dict[str, Any], reward: float, terminated: bool,
            truncated: bool, next_obs: np.ndarray) -> None:
        self.obs.append(obs)
        self.actions.append(action)
        for key, value in extras.items():
            self.extras.setdefault(key, []).append(value)
        self.rewards.append(reward)
        self.terminateds.append(terminated)
        self.truncateds.append(truncated)
        self.next_obs.append(next_obs)

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def end(self) -> int:
        """The fragment row of its last step."""
        return self.start + len(self) - 1


def assign_columns(segments: list[Segment]) -> tuple[list[int], int]:
    """A column for each segment such that no two in a column overlap (first fit by start), and the count."""
    column_of = [0] * len(segments)
    column_ends: list[int] = []  # the last row each column holds so far
    for position in sorted(range(len(segments)), key=lambda i: (segments[i].start, i)):
        segment = segments[position]
        column = next((c for c, end in enumerate(column_ends) if end < segment.start), None)
        if column is None:
            column = len(column_ends)
            column_ends.append(segment.end)
        else:
            column_ends[column] = segment.end
        column_of[position] = column
    return column_of, len(column_ends)


def column_keys(segments: list[Segment], length: int) -> list[tuple[tuple[int, str] | None, tuple[int, str] | None]]:
    """Per column of `pack`'s arrays, the (env, agent) whose trajectory its first row goes on with (a segment from
    row 0) and the one whose trajectory its last row goes on into (a segment to the last row, not done), or None.
    Columns are laid out anew each fragment, so what follows an agent from one fragment to the next goes by these."""
    segments = [s for s in segments if len(s)]
    columns, width = assign_columns(segments)
    keys: list[list[tuple[int, str] | None]] = [[None, None] for _ in range(width)]
    for segment, column in zip(segments, columns, strict=True):
        if segment.start == 0:
            keys[column][0] = (segment.env, segment.agent)
        if segment.end == length - 1 and not (segment.terminateds[-1] or segment.truncateds[-1]):
            keys[column][1] = (segment.env, segment.agent)
    return [(first, last) for first, last in keys]


def pack(segments: list[Segment], length: int) -> dict[str, np.ndarray]:
    """The segments as [length, M, ...] arrays: obs, actions, rewards, terminateds, truncateds, next_obs, valid
    and the policy's extras (empty when there are no steps)."""
    segments = [s for s in segments if len(s)]
    if not segments:
        return {}
    columns, width = assign_columns(segments)
    first = segments[0]
    obs_dtype = stored_dtype(np.asarray(first.obs[0]).dtype)
    obs_shape = np.asarray(first.obs[0]).shape
    action = np.asarray(first.actions[0])
    data: dict[str, np.ndarray] = {
        "obs": np.zeros((length, width, *obs_shape), dtype=obs_dtype),
        "next_obs": np.zeros((length, width, *obs_shape), dtype=obs_dtype),
        "actions": np.zeros((length, width, *action.shape), dtype=action.dtype),
        "rewards": np.zeros((length, width), dtype=np.float32),
        "terminateds": np.zeros((length, width), dtype=bool),
        "truncateds": np.zeros((length, width), dtype=bool),
        "valid": np.zeros((length, width), dtype=bool),
    }
    for key, values in first.extras.items():
        sample = np.asarray(values[0])
        data[key] = np.zeros((length, width, *sample.shape), dtype=sample.dtype)
    for segment, column in zip(segments, columns, strict=True):
        rows = slice(segment.start, segment.end + 1)
        data["obs"][rows, column] = np.stack(segment.obs)
        data["next_obs"][rows, column] = np.stack(segment.next_obs)
        data["actions"][rows, column] = np.stack([np.asarray(a) for a in segment.actions])
        data["rewards"][rows, column] = segment.rewards
        data["terminateds"][rows, column] = segment.terminateds
        data["truncateds"][rows, column] = segment.truncateds
        data["valid"][rows, column] = True
        for key, values in segment.extras.items():
            data[key][rows, column] = np.stack([np.asarray(v) for v in values])
    return data


__all__ = ["Segment", "assign_columns", "column_keys", "pack"]
