"""User hooks the Python API accepts: `.callbacks(on_episode_end=fn, on_train_result=fn)`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

EpisodeHook = Callable[..., None]  # fn(algorithm=..., episode=record)
ResultHook = Callable[..., None]  # fn(algorithm=..., result=result)


@dataclass(frozen=True)
class Callbacks:
    on_episode_end: EpisodeHook | None = None
    on_train_result: ResultHook | None = None

    def episode_end(self, algorithm: Any, episode: dict[str, Any]) -> None:
        if self.on_episode_end is not None:
            self.on_episode_end(algorithm=algorithm, episode=episode)

    def train_result(self, algorithm: Any, result: dict[str, Any]) -> None:
        if self.on_train_result is not None:
            self.on_train_result(algorithm=algorithm, result=result)
