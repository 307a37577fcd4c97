"""`spec.multiAgent`: which policy acts for which agent, and each policy's hyperparameters. Pure and light.

The mapping rule (`policy_for`): an agent id named exactly in a policy's `agents` goes to that policy; otherwise
to the first policy, in the order listed, with a glob pattern (`adversary_*`) that matches it. With no
`multiAgent`, or no policies, one policy named `shared` serves every agent (parameter sharing).

What needs the env (its agents and their spaces) is checked by the trainer
(`kuberl.trainer.multiagent.checks`); what the manifest alone shows is checked here, with every error naming
its field.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

from kuberl.api.algorithms import REGISTRY, hyperparameter_names
from kuberl.api.hyperparams import CommonParams
from kuberl.api.types import PolicySpec, RLExperiment, RLExperimentSpec

SHARED_POLICY = "shared"
POLICIES_PATH = "spec.multiAgent.policies"
GLOB_CHARACTERS = frozenset("*?[")
# Settings of the whole run, not of one policy's learner: refused in a policy's config where the algorithm
# has them.
RUN_WIDE_CONFIG = {
    "seed": "the run's seed is spec.config.seed",
    "observationFilter": "one observation filter serves the run: set spec.config.observationFilter",
    "minIterationSeconds": "one iteration trains every policy: set spec.config.minIterationSeconds",
    "learnerQueueSize": "the policies share one queue of fragments: set spec.config.learnerQueueSize",
    "requestsPerWorker": "each rollout worker samples for every policy at once: set "
                         "spec.config.requestsPerWorker",
}


def policies_of(spec: RLExperimentSpec) -> list[PolicySpec]:
    """The policies the run trains: spec.multiAgent.policies, or the one shared policy."""
    if spec.multi_agent is not None and spec.multi_agent.policies:
        return list(spec.multi_agent.policies)
    return [PolicySpec(name=SHARED_POLICY, agents=["*"])]


def policies_to_train(spec: RLExperimentSpec) -> list[str]:
    names = [policy.name for policy in policies_of(spec)]
    wanted = spec.multi_agent.policies_to_train if spec.multi_agent is not None else None
    return names if wanted is None else [name for name in names if name in wanted]


def is_glob(pattern: str) -> bool:
    return any(ch in GLOB_CHARACTERS for ch in pattern)


def policy_for(agent: str, policies: Sequence[PolicySpec]) -> str | None:
    """The name of the policy that acts for `agent`, or None when no policy's agents match it."""
    for policy in policies:
        if agent in policy.agents:
            return policy.name
    for policy in policies:
        if any(is_glob(pattern) and fnmatch.fnmatchcase(agent, pattern) for pattern in policy.agents):
            return policy.name
    return None


def map_agents(agents: Iterable[str], policies: Sequence[PolicySpec]) -> dict[str, str | None]:
    """agent -> the policy that acts for it (None: none does)."""
    return {agent: policy_for(agent, policies) for agent in agents}


def policy_config(spec: RLExperimentSpec, policy: PolicySpec) -> dict[str, Any]:
    """spec.config with the policy's config and model over it, as a spec.config mapping (camelCase)."""
    config = {**spec.config, **policy.config}
    model = policy.model
    if model is not None:
        if model.hidden is not None:
            config["hidden"] = list(model.hidden)
        if model.activation is not None:
            config["activation"] = model.activation
        conv_model = dict(config.get("model") or {})
        if model.conv is not None:
            conv_model["conv"] = [list(layer) for layer in model.conv]
        if model.conv_hidden is not None:
            conv_model["hidden"] = list(model.conv_hidden)
        if conv_model:
            config["model"] = conv_model
    return config


def policy_params(experiment: RLExperiment, policy: PolicySpec) -> CommonParams:
    """The policy's hyperparameters (raises pydantic's ValidationError; validation reports it by field), read by
    their manifest names only, as spec.config is."""
    spec = experiment.spec
    return REGISTRY[spec.algorithm].hyperparams.model_validate(policy_config(spec, policy), by_alias=True,
                                                               by_name=False)


def policy_errors(experiment: RLExperiment) -> list[tuple[str, str]]:
    """(field, message) for what the manifest alone shows wrong in spec.multiAgent."""
    multi = experiment.spec.multi_agent
    if multi is None:
        return []
    errors: list[tuple[str, str]] = []
    hyperparameters = hyperparameter_names(experiment.spec.algorithm)
    run_wide = {key: why for key, why in RUN_WIDE_CONFIG.items() if key in hyperparameters}
    seen: dict[str, int] = {}
    exact: dict[str, str] = {}
    for index, policy in enumerate(multi.policies):
        path = f"{POLICIES_PATH}[{index}]"
        if policy.name in seen:
            errors.append((f"{path}.name", f"{policy.name!r} is also the name of policies[{seen[policy.name]}]"))
        seen.setdefault(policy.name, index)
        for position, agent in enumerate(policy.agents):
            if not is_glob(agent):
                if agent in exact and exact[agent] != policy.name:
                    errors.append((f"{path}.agents[{position}]",
                                   f"agent {agent!r} is already served by policy {exact[agent]!r}"))
                exact.setdefault(agent, policy.name)
        errors.extend((f"{path}.config.{key}", why) for key, why in run_wide.items() if key in policy.config)
    names = [policy.name for policy in policies_of(experiment.spec)]
    for index, name in enumerate(multi.policies_to_train or []):
        if name not in names:
            errors.append((f"spec.multiAgent.policiesToTrain[{index}]",
                           f"no policy is named {name!r} (policies: {', '.join(names)})"))
    return errors


def mapping_errors(agents: Sequence[str], policies: Sequence[PolicySpec], *,
                   configured: bool) -> list[tuple[str, str]]:
    """(field, message) for agents no policy serves and policies that serve no agent of the env."""
    mapping = map_agents(agents, policies)
    errors: list[tuple[str, str]] = []
    orphans = [agent for agent, policy in mapping.items() if policy is None]
    if orphans:
        errors.append((POLICIES_PATH, f"no policy serves agent(s) {', '.join(map(repr, orphans))} "
                                      f"(the env's agents: {', '.join(agents)}); add them, or a pattern such as '*', "
                                      "to some policy's agents"))
    if configured:
        used = set(mapping.values())
        for index, policy in enumerate(policies):
            if policy.name not in used:
                errors.append((f"{POLICIES_PATH}[{index}].agents",
                               f"policy {policy.name!r} serves none of the env's agents ({', '.join(agents)})"))
    return errors


__all__ = [
    "POLICIES_PATH", "SHARED_POLICY", "map_agents", "mapping_errors", "policies_of", "policies_to_train",
    "policy_config", "policy_errors", "policy_for", "policy_params",
]
