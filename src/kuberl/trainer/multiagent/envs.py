"""Multi-agent envs: PettingZoo's Parallel API, named in `spec.env.id`.

Two forms (beside the single-agent ones of `kuberl.trainer.sampling.env_ids`):

- `package:env_module` (`mpe2:simple_spread_v3`, `pettingzoo.butterfly:pistonball_v6`): the submodule's
  `parallel_env(**spec.env.config)`, or its AEC `env` through PettingZoo's `aec_to_parallel` where the env says
  it can be (`metadata["is_parallelizable"]`);
- `package.env_module:factory`: a callable (a function, or a ParallelEnv or AECEnv class) called with
  `spec.env.config`, which returns a ParallelEnv (or a parallelizable AECEnv).

`multi_agent_factory(env_id)` says which an id is: a factory for a multi-agent id, None for a single-agent one
(a Gymnasium id, a gymnasium.Env class). A turn-based AEC env that cannot run in parallel is refused with
`MultiAgentEnvError` naming the id.

`spec.env.wrappers` wrap the ParallelEnv in order (`wrap_parallel`): each names a callable that takes the env and
its kwargs and returns a ParallelEnv, as SuperSuit's wrappers do (`supersuit:resize_v1` to shrink pistonball's
457x120 RGB frames, `supersuit:frame_stack_v1`, ...).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from kuberl.trainer.sampling.env_ids import EnvNotFound, missing_package_hint, parse_env_id
from kuberl.trainer.sampling.envs import EnvSettings
from kuberl.trainer.sampling.spaces_memo import remembered
from kuberl.trainer.sampling.wrappers import WrapperError, WrapperSettings, import_named

ParallelFactory = Callable[..., Any]  # (**config) -> pettingzoo.ParallelEnv


class MultiAgentEnvError(EnvNotFound):
    """spec.env.id names a multi-agent env kuberl cannot run (a turn-based AEC env, a factory's odd result)."""


def _pettingzoo() -> Any:
    try:
        import pettingzoo
    except ImportError as exc:
        raise EnvNotFound(f"multi-agent envs need pettingzoo ({exc}): install kuberl[multiagent]") from None
    return pettingzoo


def _import(module: str, env_id: str) -> types.ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EnvNotFound(f"{env_id!r} needs the Python module {module!r}, which cannot be imported "
                          f"({exc}): {missing_package_hint(exc)}") from None


def _attribute(env_id: str) -> object | None:
    """What `module:name` names: the attribute, or the submodule `module.name`; None for a Gymnasium id."""
    parsed = parse_env_id(env_id)
    if parsed.kind != "class" or parsed.module is None:
        return None
    module = _import(parsed.module, env_id)
    target: object = module
    for part in parsed.name.split("."):
        found = getattr(target, part, None)
        if found is None and isinstance(target, types.ModuleType):
            try:
                found = importlib.import_module(f"{target.__name__}.{part}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{target.__name__}.{part}":
                    raise EnvNotFound(f"{env_id!r}: importing {target.__name__}.{part} failed ({exc}): "
                                      f"{missing_package_hint(exc)}") from None
                found = None
        if found is None:
            raise EnvNotFound(f"{env_id!r}: {parsed.module!r} has no attribute or submodule {parsed.name!r}")
        target = found
    return target


def to_parallel(env: Any, env_id: str) -> Any:
    """A ParallelEnv from what a factory returned: itself, or an AEC env through PettingZoo's `aec_to_parallel`
    where it can run in parallel."""
    pettingzoo = _pettingzoo()
    if isinstance(env, pettingzoo.ParallelEnv):
        return env
    if isinstance(env, pettingzoo.AECEnv):
        if not env.metadata.get("is_parallelizable", False):
            env.close()
            raise MultiAgentEnvError(f"{env_id!r} is a turn-based AEC env that PettingZoo cannot convert to the "
                                     "Parallel API (its metadata lacks is_parallelizable); kuberl trains "
                                     "Parallel envs and AEC envs that can run in parallel")
        from pettingzoo.utils.conversions import aec_to_parallel

        return aec_to_parallel(env)
    raise MultiAgentEnvError(f"{env_id!r} returned a {type(env).__name__}, not a PettingZoo ParallelEnv or AECEnv")


def multi_agent_factory(env_id: str) -> ParallelFactory | None:
    """(**config) -> ParallelEnv for a multi-agent id; None for a single-agent one. Raises EnvNotFound."""
    if ":" not in env_id or parse_env_id(env_id).kind != "class":
        return None
    target = _attribute(env_id)
    if target is None or (isinstance(target, type) and issubclass(target, gym.Env)):
        return None
    if isinstance(target, types.ModuleType):
        make = getattr(target, "parallel_env", None) or getattr(target, "env", None)
        if make is None:
            raise MultiAgentEnvError(f"{env_id!r}: module {target.__name__} has neither parallel_env nor env "
                                     "(a PettingZoo env module has both)")
    elif callable(target):
        make = target
    else:
        raise EnvNotFound(f"{env_id!r} names a {type(target).__name__}, not an env module, class or factory")
    return lambda **config: to_parallel(make(**config), env_id)


def is_multi_agent(env_id: str) -> bool:
    """spec.env.id names a multi-agent (PettingZoo) env. Raises EnvNotFound for an id that names nothing."""
    return multi_agent_factory(env_id) is not None


def wrap_parallel(env: Any, wrappers: Sequence[WrapperSettings]) -> Any:
    """The ParallelEnv with `spec.env.wrappers` applied in order; WrapperError names the one that failed (and the
    env built so far is closed)."""
    try:
        for index, settings in enumerate(wrappers):
            env = _wrap_once(env, index, settings)
    except WrapperError:
        env.close()
        raise
    return env


def _wrap_once(env: Any, index: int, settings: WrapperSettings) -> Any:
    wrapper = import_named(settings.name, index)
    if not callable(wrapper):
        raise WrapperError(index, f"{settings.name!r} is not callable: a multi-agent env's wrapper takes the "
                                  "ParallelEnv and returns one (such as supersuit:resize_v1)")
    try:
        wrapped = wrapper(env, **settings.kwargs)
    except TypeError as exc:
        raise WrapperError(index, f"{settings.name} does not take these kwargs: {exc}", "kwargs") from None
    except Exception as exc:  # noqa: BLE001 - a wrapper refusing this env (resizing vectors, ...) is the user's to fix
        raise WrapperError(index, f"{settings.name} cannot wrap this env: {type(exc).__name__}: {exc}") from None
    if not all(hasattr(wrapped, name) for name in ("possible_agents", "reset", "step", "observation_space")):
        raise WrapperError(index, f"{settings.name} returned a {type(wrapped).__name__}, not a PettingZoo "
                                  "ParallelEnv")
    return wrapped


def make_parallel_env(env_id: str, config: dict[str, Any] | None = None,
                      wrappers: Sequence[WrapperSettings] = ()) -> Any:
    factory = multi_agent_factory(env_id)
    if factory is None:
        raise EnvNotFound(f"{env_id!r} is not a multi-agent env")
    return wrap_parallel(factory(**dict(config or {})), wrappers)


@dataclass(frozen=True)
class AgentSpaces:
    """The env's possible agents (in its order) and each one's observation and action space."""

    agents: tuple[str, ...]
    observation_spaces: dict[str, gym.Space]
    action_spaces: dict[str, gym.Space]


def agent_spaces(env_id: str, config: dict[str, Any] | None = None,
                 wrappers: Sequence[WrapperSettings] = ()) -> AgentSpaces:
    """The env's agents and spaces (wrapped), from one build per process for the same id, config and wrappers
    (`spaces_memo`)."""
    settings = {"multiAgent": env_id, "config": dict(config or {}),
                "wrappers": [[w.name, dict(w.kwargs)] for w in wrappers]}
    return remembered(settings, lambda: _attribute(env_id), lambda: _built_agent_spaces(env_id, config, wrappers))


def spec_agent_spaces(env: Any) -> AgentSpaces:
    """`agent_spaces` of the API's `spec.env` (its id, config and wrappers)."""
    settings = EnvSettings.from_spec(env)
    return agent_spaces(settings.id, settings.config, settings.wrappers)


def _built_agent_spaces(env_id: str, config: dict[str, Any] | None,
                        wrappers: Sequence[WrapperSettings]) -> AgentSpaces:
    env = make_parallel_env(env_id, config, wrappers)
    try:
        agents = tuple(str(agent) for agent in env.possible_agents)
        return AgentSpaces(agents, {a: env.observation_space(a) for a in env.possible_agents},
                           {a: env.action_space(a) for a in env.possible_agents})
    finally:
        env.close()


__all__ = ["AgentSpaces", "MultiAgentEnvError", "agent_spaces", "is_multi_agent", "make_parallel_env",
           "multi_agent_factory", "spec_agent_spaces", "to_parallel", "wrap_parallel"]
