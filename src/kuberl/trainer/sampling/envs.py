"""Environments: a Gymnasium id or a user's "package.module:Class", preprocessed, single or vectorised.

`env_ids` says what an id names; `atari` is the `preprocessing: atari` preset; `wrappers`
applies `env.wrappers`. Vector envs use Gymnasium's own fast vector implementation where a
Gymnasium env has one and nothing wraps it (CartPole's `vector_entry_point` steps all copies in
one numpy call), and a SyncVectorEnv of single envs otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from kuberl.trainer.sampling.atari import atari_preset, is_ale_spec, is_atari
from kuberl.trainer.sampling.atari_vector import make_atari_vector
from kuberl.trainer.sampling.env_ids import (
    EnvNotFound,
    gym_spec,
    import_env_class,
    import_module,
    missing_package_hint,
    parse_env_id,
)
from kuberl.trainer.sampling.spaces_memo import remembered
from kuberl.trainer.sampling.wrappers import WrapperSettings, apply_wrappers

Preprocessing = Literal["none", "atari"]


class PreprocessingError(ValueError):
    """`env.preprocessing` does not fit the env (atari on a non-ALE env, a frameskip it would repeat)."""


@dataclass(frozen=True)
class EnvSettings:
    """Everything that builds one env: `spec.env` in a picklable form."""

    id: str
    config: dict[str, Any] = field(default_factory=dict)
    preprocessing: Preprocessing = "none"
    wrappers: tuple[WrapperSettings, ...] = ()

    @classmethod
    def from_spec(cls, env: Any) -> EnvSettings:
        """From the API's EnvSpec."""
        wrappers = tuple(WrapperSettings(w.name, dict(w.kwargs)) for w in getattr(env, "wrappers", []))
        return cls(env.id, dict(env.config), getattr(env, "preprocessing", "none"), wrappers)


def _make_base(settings: EnvSettings) -> gym.Env:
    config = dict(settings.config)
    parsed = parse_env_id(settings.id)
    if parsed.kind == "class":
        return import_env_class(settings.id)(**config)
    registered = gym_spec(settings.id)
    if settings.preprocessing == "atari":
        if not is_ale_spec(registered):
            raise PreprocessingError(f"preprocessing atari needs an ALE env (such as ALE/Pong-v5), not {settings.id!r}")
        if "frameskip" in config:
            raise PreprocessingError("preprocessing atari skips 4 frames itself; leave frameskip out of spec.env.config")
        config["frameskip"] = 1
    try:
        return gym.make(parsed.name, **config)
    except ImportError as exc:
        raise EnvNotFound(f"{settings.id!r} cannot be created: {exc}: {missing_package_hint(exc)}") from None
    except gym.error.DependencyNotInstalled as exc:
        raise EnvNotFound(f"{settings.id!r} cannot be created: {exc}") from None


def make_env(env_id: str | EnvSettings, env_config: dict[str, Any] | None = None, *,
             training: bool = True) -> gym.Env:
    """One environment instance; training=False leaves out what only the learner wants (atari: episodic
    life and reward clipping), so that evaluation plays and scores whole games."""
    settings = env_id if isinstance(env_id, EnvSettings) else EnvSettings(env_id, dict(env_config or {}))
    env = _make_base(settings)
    if settings.preprocessing == "atari":
        if not is_atari(env):
            env.close()
            raise PreprocessingError(f"preprocessing atari needs an ALE env (such as ALE/Pong-v5), not {settings.id!r}")
        env = atari_preset(env, training=training)
    return apply_wrappers(env, settings.wrappers)


def env_creator(settings: EnvSettings) -> Callable[[], gym.Env]:
    return lambda: make_env(settings)


@dataclass(frozen=True)
class EnvSpaces:
    observation_space: gym.Space
    action_space: gym.Space
    frame_stack: int = 1  # k when observations are FrameStackObservation stacks (replay stores single frames)


def env_spaces(env_id: str | EnvSettings, env_config: dict[str, Any] | None = None) -> EnvSpaces:
    """The env's spaces, from one build per process for the same settings (`spaces_memo`)."""
    settings = env_id if isinstance(env_id, EnvSettings) else EnvSettings(env_id, dict(env_config or {}))
    return remembered(asdict(settings), lambda: _builder(settings), lambda: _built_spaces(settings))


def _builder(settings: EnvSettings) -> object:
    """What builds the env: the id's registered spec, or the class."""
    if parse_env_id(settings.id).kind == "class":
        return import_env_class(settings.id)
    return gym_spec(settings.id)


def _built_spaces(settings: EnvSettings) -> EnvSpaces:
    from kuberl.trainer.replay.frames import frame_stack_depth

    env = make_env(settings)
    try:
        return EnvSpaces(env.observation_space, env.action_space, frame_stack_depth(env))
    finally:
        env.close()


def _native_vector(settings: EnvSettings) -> bool:
    """Gymnasium's own vector implementation fits: a Gymnasium env of Gymnasium's, nothing wrapped."""
    if parse_env_id(settings.id).kind != "gymnasium" or settings.preprocessing != "none" or settings.wrappers:
        return False
    entry = gym_spec(settings.id).vector_entry_point
    return isinstance(entry, str) and entry.startswith("gymnasium.")


def make_vector_env(env_id: str | EnvSettings, env_config: dict[str, Any] | None = None,
                    num_envs: int = 1, threads: int = 1) -> gym.vector.VectorEnv:
    """`num_envs` copies of the env stepped together (by `threads` threads where ALE's vector env runs them).

    The result autoresets either on the next step (Gymnasium's native vector
    envs, ALE's for the atari preset) or in the same step with `final_obs` in the info (the sync
    fallback); `autoreset_mode(env)` says which, and the rollout worker handles both.
    """
    settings = env_id if isinstance(env_id, EnvSettings) else EnvSettings(env_id, dict(env_config or {}))
    if settings.preprocessing == "atari" and not settings.wrappers and parse_env_id(settings.id).kind != "class":
        registered = gym_spec(settings.id)
        if is_ale_spec(registered):
            atari = make_atari_vector(registered, settings.config, num_envs, threads)
            if atari is not None:
                return atari
    if _native_vector(settings):
        try:
            return gym.make_vec(parse_env_id(settings.id).name, num_envs=num_envs,
                                vectorization_mode="vector_entry_point", **settings.config)
        except TypeError:
            pass  # env.config holds a keyword only the single env takes
    return gym.vector.SyncVectorEnv(
        [env_creator(settings) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP
    )


def autoreset_mode(env: gym.vector.VectorEnv) -> AutoresetMode:
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return AutoresetMode(mode) if isinstance(mode, str) else mode


__all__ = [
    "EnvNotFound", "EnvSettings", "EnvSpaces", "PreprocessingError", "autoreset_mode", "env_creator",
    "env_spaces", "gym_spec", "import_env_class", "import_module", "make_env", "make_vector_env",
]
