"""Checks of a multi-agent experiment that need its env: the agents, their spaces, what the policies can learn.

`multi_agent_env_errors` answers None for a single-agent env (then `kuberl.trainer.run.checks` goes on as it
always has), else the list of problems, each naming its field: an agent no policy serves, a policy serving agents
whose observation or action spaces differ, a space the algorithm cannot act in.
"""

from __future__ import annotations

import gymnasium as gym

from kuberl.api.algorithms import REGISTRY
from kuberl.api.field_errors import FieldError
from kuberl.api.multiagent import POLICIES_PATH, map_agents, mapping_errors, policies_of
from kuberl.api.types import RLExperiment
from kuberl.trainer.models.image_shapes import ImageLayoutError, conv_output_shape, is_image_space
from kuberl.trainer.multiagent.algorithm import ALGORITHMS, UNSUPPORTED
from kuberl.trainer.multiagent.envs import AgentSpaces, is_multi_agent, spec_agent_spaces
from kuberl.trainer.run.env_failures import env_construction_errors
from kuberl.trainer.sampling.env_ids import EnvNotFound
from kuberl.trainer.sampling.wrappers import WrapperError


def _space(space: gym.Space) -> str:
    return f"{type(space).__name__}{getattr(space, 'shape', '') or ''}" + (
        f"({space.n})" if isinstance(space, gym.spaces.Discrete) else "")


def _policy_path(experiment: RLExperiment, index: int) -> str:
    multi = experiment.spec.multi_agent
    if multi is None or not multi.policies:
        return "spec.multiAgent"
    return f"{POLICIES_PATH}[{index}].agents"


def _agents_of(experiment: RLExperiment, spaces: AgentSpaces) -> list[tuple[int, str, list[str]]]:
    policies = policies_of(experiment.spec)
    mapping = map_agents(spaces.agents, policies)
    return [(index, policy.name, [a for a, p in mapping.items() if p == policy.name])
            for index, policy in enumerate(policies)]


def clash_errors(experiment: RLExperiment, spaces: AgentSpaces) -> list[FieldError]:
    """A policy whose agents' observation or action spaces differ: which agents, which field."""
    errors: list[FieldError] = []
    for index, name, agents in _agents_of(experiment, spaces):
        if not agents:
            continue
        first = agents[0]
        for field, by_agent in (("observation", spaces.observation_spaces), ("action", spaces.action_spaces)):
            clashing = [a for a in agents[1:] if by_agent[a] != by_agent[first]]
            if clashing:
                shared = " (the default shared policy)" if _policy_path(experiment, index) == "spec.multiAgent" else ""
                errors.append(FieldError(_policy_path(experiment, index), (
                    f"policy {name!r}{shared} serves agents whose {field} spaces differ: {first!r} has "
                    f"{_space(by_agent[first])}, " + ", ".join(f"{a!r} has {_space(by_agent[a])}" for a in clashing)
                    + "; map them to different policies in spec.multiAgent.policies")))
    return errors


def _space_errors(experiment: RLExperiment, spaces: AgentSpaces) -> list[FieldError]:
    spec = experiment.spec
    entry = REGISTRY[spec.algorithm]
    id_feature = spec.multi_agent is not None and spec.multi_agent.agent_id_feature
    errors: list[FieldError] = []
    for _index, name, agents in _agents_of(experiment, spaces):
        if not agents:
            continue
        observation, action = spaces.observation_spaces[agents[0]], spaces.action_spaces[agents[0]]
        if type(action).__name__ not in entry.action_spaces:
            errors.append(FieldError("spec.algorithm", f"{spec.algorithm} needs {' or '.join(entry.action_spaces)} "
                                     f"actions, but policy {name!r}'s agents have {_space(action)}"))
        if type(observation).__name__ not in entry.observation_spaces:
            errors.append(FieldError("spec.env.id", f"policy {name!r}'s agents observe {_space(observation)}; kuberl "
                                     f"needs {' or '.join(entry.observation_spaces)} observations"))
        elif is_image_space(observation):
            if id_feature:
                errors.append(FieldError("spec.multiAgent.agentIdFeature",
                                         f"is for vector observations; policy {name!r}'s agents observe images"))
            try:
                conv_output_shape(observation, entry.hyperparams.model_validate(spec.config).model.conv)
            except (ImageLayoutError, ValueError) as exc:
                errors.append(FieldError("spec.config.model.conv", str(exc)))
        elif id_feature and len(observation.shape or ()) != 1:
            errors.append(FieldError("spec.multiAgent.agentIdFeature",
                                     f"needs flat vector observations; policy {name!r}'s are {_space(observation)}"))
    return errors


def _run_errors(experiment: RLExperiment) -> list[FieldError]:
    """What multi-agent training does not do yet, named by field."""
    spec = experiment.spec
    errors: list[FieldError] = []
    if spec.algorithm not in ALGORITHMS:
        errors.append(FieldError("spec.algorithm", f"{spec.algorithm} does not train multi-agent envs: "
                                 f"{UNSUPPORTED.get(spec.algorithm, 'not supported')}; use {', '.join(ALGORITHMS)}"))
    if spec.config.get("observationFilter", "none") != "none":
        errors.append(FieldError("spec.config.observationFilter", "multi-agent runs keep no observation filter "
                                 "(each policy would need its own); leave it none"))
    if spec.env.preprocessing != "none":
        errors.append(FieldError("spec.env.preprocessing", "applies to Gymnasium envs; wrap a PettingZoo env with "
                                 "spec.env.wrappers (such as supersuit:resize_v1) instead"))
    return errors


def multi_agent_env_errors(experiment: RLExperiment) -> list[FieldError] | None:
    """None when spec.env.id names a single-agent env; else the multi-agent problems (empty: none)."""
    spec = experiment.spec
    try:
        if not is_multi_agent(spec.env.id):
            if spec.multi_agent is not None:
                return [FieldError("spec.multiAgent", f"{spec.env.id!r} is a single-agent env; spec.multiAgent is "
                                   "for PettingZoo envs (such as mpe2:simple_spread_v3)")]
            return None
        spaces = spec_agent_spaces(spec.env)
    except EnvNotFound as exc:
        return [FieldError("spec.env.id", str(exc))]
    except WrapperError as exc:
        return [FieldError(f"spec.env.wrappers[{exc.index}].{exc.field}", str(exc))]
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user's env may raise anything; report it, do not crash
        return env_construction_errors(spec.env.id, exc)
    errors = _run_errors(experiment)
    configured = spec.multi_agent is not None and bool(spec.multi_agent.policies)
    mapped = [FieldError(path, message) for path, message in
              mapping_errors(spaces.agents, policies_of(spec), configured=configured)]
    clashes = clash_errors(experiment, spaces)
    return errors + mapped + clashes + ([] if clashes or mapped else _space_errors(experiment, spaces))


__all__ = ["clash_errors", "multi_agent_env_errors"]
