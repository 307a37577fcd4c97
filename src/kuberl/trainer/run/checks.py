"""Checks that need the trainer's libraries: does the env exist, can the algorithm act in it."""

from __future__ import annotations

import gymnasium as gym

from kuberl.api.algorithms import REGISTRY
from kuberl.api.field_errors import FieldError
from kuberl.api.types import RLExperiment
from kuberl.api.validation import hyperparams_for, may_name_multi_agent_env, minibatch_errors
from kuberl.trainer.models.image_shapes import ImageLayoutError, conv_output_shape, is_image_space
from kuberl.trainer.run.callbacks import CallbacksNotFound, import_callbacks_class
from kuberl.trainer.run.env_failures import env_construction_errors
from kuberl.trainer.sampling.envs import EnvNotFound, EnvSettings, PreprocessingError, env_spaces
from kuberl.trainer.sampling.wrappers import WrapperError


def _space_classes(names: tuple[str, ...]) -> tuple[type[gym.Space], ...]:
    return tuple(getattr(gym.spaces, name) for name in names)


def _space_name(space: gym.Space) -> str:
    return f"{type(space).__name__}{getattr(space, 'shape', '') or ''}"


def _build_errors(experiment: RLExperiment) -> tuple[gym.Space, gym.Space] | list[FieldError]:
    env = experiment.spec.env
    try:
        spaces = env_spaces(EnvSettings.from_spec(env))
    except EnvNotFound as exc:
        return [FieldError("spec.env.id", str(exc))]
    except PreprocessingError as exc:
        path = "spec.env.config.frameskip" if "frameskip" in str(exc) else "spec.env.preprocessing"
        return [FieldError(path, str(exc))]
    except WrapperError as exc:
        return [FieldError(f"spec.env.wrappers[{exc.index}].{exc.field}", str(exc))]
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user's env may raise anything; report it, do not crash
        return env_construction_errors(env.id, exc)
    return spaces.observation_space, spaces.action_space



def _image_errors(experiment: RLExperiment, observation_space: gym.Space) -> list[FieldError]:
    params = hyperparams_for(experiment)
    errors: list[FieldError] = []
    if params.observation_filter != "none":
        errors.append(FieldError("spec.config.observationFilter",
                                 f"{params.observation_filter} is for vector observations; images are scaled by 1/255"))
    try:
        conv_output_shape(observation_space, params.model.conv)
    except ImageLayoutError as exc:
        errors.append(FieldError("spec.config.model.conv", str(exc)))
    return errors


def env_errors(experiment: RLExperiment) -> list[FieldError]:
    """Problems with spec.env for spec.algorithm; empty when the env can be built and used."""
    from kuberl.trainer.multiagent.checks import multi_agent_env_errors

    multi_agent = multi_agent_env_errors(experiment)  # None: a single-agent env
    if multi_agent is not None:
        return multi_agent
    spec = experiment.spec
    built = _build_errors(experiment)
    if isinstance(built, list):
        return built
    observation_space, action_space = built
    entry = REGISTRY[spec.algorithm]
    # A single-agent env whose id the API could not tell from a PettingZoo one: the check the API left.
    errors = minibatch_errors(experiment) if may_name_multi_agent_env(spec.env.id) else []
    if not isinstance(action_space, _space_classes(entry.action_spaces)):
        hint = ""
        for space, kind in (("Box", "continuous"), ("Discrete", "discrete")):
            if space not in entry.action_spaces and isinstance(action_space, _space_classes((space,))):
                fits = [name for name, other in REGISTRY.items() if space in other.action_spaces]
                hint = f" (use {' or '.join(fits)} for {kind} actions)"
        errors.append(
            FieldError(
                "spec.algorithm",
                f"{spec.algorithm} needs {' or '.join(entry.action_spaces)} actions, but {spec.env.id!r} has a "
                f"{_space_name(action_space)} action space" + hint,
            )
        )
    if not isinstance(observation_space, _space_classes(entry.observation_spaces)):
        errors.append(
            FieldError(
                "spec.env.id",
                f"{spec.env.id!r} has a {_space_name(observation_space)} observation space; "
                f"kuberl needs {' or '.join(entry.observation_spaces)} observations",
            )
        )
    elif is_image_space(observation_space):
        errors.extend(_image_errors(experiment, observation_space))
    return errors


def callbacks_errors(experiment: RLExperiment) -> list[FieldError]:
    """Problems with spec.callbacks: the class it names must import and subclass Callbacks."""
    path = experiment.spec.callbacks
    if not path:
        return []
    try:
        import_callbacks_class(path)
    except CallbacksNotFound as exc:
        return [FieldError("spec.callbacks", str(exc))]
    return []
