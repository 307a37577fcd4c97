"""Environments: a Gymnasium id or a user's "package.module:Class", single or vectorised.

Vector envs use Gymnasium's own fast vector implementation where the env has
one (CartPole's `vector_entry_point` steps all copies in one numpy call), and
a SyncVectorEnv of single envs otherwise.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode


class EnvNotFound(ValueError):
    """The env id names nothing Gymnasium knows and no importable class."""


def is_class_path(env_id: str) -> bool:
    return ":" in env_id


def import_env_class(env_id: str) -> type:
    """Import "package.module:Class"; raises EnvNotFound with the reason."""
    module_name, _, class_name = env_id.partition(":")
    if not module_name or not class_name:
        raise EnvNotFound(f"{env_id!r}: expected package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvNotFound(f"{env_id!r}: cannot import module {module_name!r} ({exc})") from None
    env_class = getattr(module, class_name, None)
    if env_class is None:
        raise EnvNotFound(f"{env_id!r}: module {module_name!r} has no attribute {class_name!r}")
    if not isinstance(env_class, type) or not issubclass(env_class, gym.Env):
        raise EnvNotFound(f"{env_id!r}: {class_name} is not a gymnasium.Env subclass")
    return env_class


def gym_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of a Gymnasium id; raises EnvNotFound with a suggestion."""
    try:
        return gym.spec(env_id)
    except gym.error.Error as exc:
        raise EnvNotFound(f"unknown Gymnasium env id {env_id!r} ({exc})") from None


def make_env(env_id: str, env_config: dict[str, Any] | None = None) -> gym.Env:
    """One environment instance."""
    config = dict(env_config or {})
    if is_class_path(env_id):
        return import_env_class(env_id)(**config)
    gym_spec(env_id)
    return gym.make(env_id, **config)


def env_creator(env_id: str, env_config: dict[str, Any] | None = None) -> Callable[[], gym.Env]:
    config = dict(env_config or {})
    return lambda: make_env(env_id, config)


@dataclass(frozen=True)
class EnvSpaces:
    observation_space: gym.Space
    action_space: gym.Space
    frame_stack: int = 1  # k when observations are FrameStackObservation stacks (replay stores single frames)


def env_spaces(env_id: str, env_config: dict[str, Any] | None = None) -> EnvSpaces:
    from kuberl.trainer.replay.frames import frame_stack_depth

    env = make_env(env_id, env_config)
    try:
        return EnvSpaces(env.observation_space, env.action_space, frame_stack_depth(env))
    finally:
        env.close()


def make_vector_env(env_id: str, env_config: dict[str, Any] | None, num_envs: int) -> gym.vector.VectorEnv:
    """`num_envs` copies of the env stepped together.

    The result autoresets either on the next step (Gymnasium's native vector
    envs) or in the same step with `final_obs` in the info (the sync
    fallback); `autoreset_mode(env)` says which, and the rollout worker handles both.
    """
    config = dict(env_config or {})
    if not is_class_path(env_id) and gym_spec(env_id).vector_entry_point is not None:
        try:
            return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **config)
        except TypeError:
            pass  # env.config holds a keyword only the single env takes
    return gym.vector.SyncVectorEnv(
        [env_creator(env_id, config) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP
    )


def autoreset_mode(env: gym.vector.VectorEnv) -> AutoresetMode:
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return AutoresetMode(mode) if isinstance(mode, str) else mode
