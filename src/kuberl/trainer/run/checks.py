"""Checks that need the trainer's libraries: does the env exist, can the algorithm act in it."""

from __future__ import annotations

import gymnasium as gym

from kuberl.api.algorithms import REGISTRY
from kuberl.api.types import RLExperiment
from kuberl.api.validation import FieldError
from kuberl.trainer.sampling.envs import EnvNotFound, env_spaces


def _space_classes(names: tuple[str, ...]) -> tuple[type[gym.Space], ...]:
    return tuple(getattr(gym.spaces, name) for name in names)


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
    entry = REGISTRY[spec.algorithm]
    errors: list[FieldError] = []
    if not isinstance(spaces.action_space, _space_classes(entry.action_spaces)):
        continuous = [name for name, other in REGISTRY.items() if "Box" in other.action_spaces]
        hint = f" (use {' or '.join(continuous)} for continuous actions)" if "Box" not in entry.action_spaces else ""
        errors.append(
            FieldError(
                "spec.env.id",
                f"{spec.env.id!r} has a {_space_name(spaces.action_space)} action space; "
                f"{spec.algorithm} needs {' or '.join(entry.action_spaces)} actions" + hint,
            )
        )
    if not isinstance(spaces.observation_space, _space_classes(entry.observation_spaces)):
        errors.append(
            FieldError(
                "spec.env.id",
                f"{spec.env.id!r} has a {_space_name(spaces.observation_space)} observation space; "
                f"kuberl needs {' or '.join(entry.observation_spaces)} observations",
            )
        )
    return errors
