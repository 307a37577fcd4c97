"""Checks that need the trainer's libraries: does the env exist, can the algorithm act in it."""

from __future__ import annotations

import gymnasium as gym

from kuberl.api.types import RLExperiment
from kuberl.api.validation import FieldError
from kuberl.trainer.sampling.envs import EnvNotFound, env_spaces

# The action spaces each algorithm can act in.
ACTION_SPACES: dict[str, tuple[type[gym.Space], ...]] = {
    "ppo": (gym.spaces.Discrete, gym.spaces.Box),
    "dqn": (gym.spaces.Discrete,),
    "apex-dqn": (gym.spaces.Discrete,),
}


def _space_name(space: gym.Space) -> str:
    return f"{type(space).__name__}{getattr(space, 'shape', '') or ''}"


def env_errors(experiment: RLExperiment) -> list[FieldError]:
    """Problems with spec.env for spec.algorithm; empty when the env can be built and used."""
    spec = experiment.spec
    try:
        spaces = env_spaces(spec.env.id, spec.env.config)
    except EnvNotFound as exc:
        return [FieldError("spec.env.id", str(exc))]
    except TypeError as exc:
        return [FieldError("spec.env.config", f"the env {spec.env.id!r} does not accept it: {exc}")]
    except Exception as exc:  # noqa: BLE001 - a user's env may raise anything; report it, do not crash
        return [FieldError("spec.env.id", f"creating {spec.env.id!r} failed: {type(exc).__name__}: {exc}")]
    except SystemExit as exc:  # an env module that exits on import must not end the trainer with its code
        return [FieldError("spec.env.id", f"creating {spec.env.id!r} failed: it called sys.exit({exc.code!r})")]
    errors: list[FieldError] = []
    supported = ACTION_SPACES[spec.algorithm]
    if not isinstance(spaces.action_space, supported):
        names = " or ".join(s.__name__ for s in supported)
        errors.append(
            FieldError(
                "spec.env.id",
                f"{spec.env.id!r} has a {_space_name(spaces.action_space)} action space; "
                f"{spec.algorithm} needs {names} actions" + (" (use ppo for continuous actions)" if spec.algorithm != "ppo" else ""),
            )
        )
    if not isinstance(spaces.observation_space, gym.spaces.Box):
        errors.append(
            FieldError(
                "spec.env.id",
                f"{spec.env.id!r} has a {_space_name(spaces.observation_space)} observation space; "
                "kuberl needs Box observations",
            )
        )
    return errors
