"""`env.wrappers`: Gymnasium wrappers (or a user's) applied in order, each with its keyword arguments."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym


class WrapperError(ValueError):
    """A wrapper that cannot be imported or applied; `index` is its place in spec.env.wrappers."""

    def __init__(self, index: int, message: str, field: str = "name"):
        self.index = index
        self.field = field  # "name" or "kwargs"
        super().__init__(message)


@dataclass(frozen=True)
class WrapperSettings:
    name: str  # gymnasium.wrappers.X or package.module:Class
    kwargs: dict[str, Any] = field(default_factory=dict)


def import_wrapper(name: str, index: int = 0) -> type:
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WrapperError(index, f"cannot import module {module_name!r} ({exc})") from None
    wrapper = getattr(module, attr, None)
    if not isinstance(wrapper, type) or not issubclass(wrapper, gym.Wrapper):
        raise WrapperError(index, f"{name!r} is not a gymnasium.Wrapper subclass")
    return wrapper


def apply_wrappers(env: gym.Env, wrappers: Sequence[WrapperSettings]) -> gym.Env:
    for index, settings in enumerate(wrappers):
        wrapper = import_wrapper(settings.name, index)
        try:
            env = wrapper(env, **settings.kwargs)
        except TypeError as exc:
            raise WrapperError(index, f"{settings.name} does not take these kwargs: {exc}", "kwargs") from None
    return env
