"""`env.wrappers`: Gymnasium wrappers (or a user's) applied in order, each with its keyword arguments.

A multi-agent (PettingZoo) env takes callables instead, each given the ParallelEnv and returning one (SuperSuit's
`resize_v1`, `color_reduction_v0`, `frame_stack_v1`, ...): `kuberl.trainer.multiagent.envs.wrap_parallel`."""

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


def import_named(name: str, index: int = 0) -> Any:
    """What `package.module:Name` or `package.module.Name` names (None if the module lacks it)."""
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WrapperError(index, f"cannot import module {module_name!r} ({exc})") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
    return target


def import_wrapper(name: str, index: int = 0) -> type:
    wrapper = import_named(name, index)
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
