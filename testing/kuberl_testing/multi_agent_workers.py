"""Multi-agent rollout workers for tests: on RelayEnv with the parity policy (every reward 1), or any env."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kuberl.api.validation import validate_document
from kuberl.trainer.multiagent.envs import agent_spaces
from kuberl.trainer.multiagent.policy_map import PolicyMap
from kuberl.trainer.multiagent.rollout_worker import MultiAgentPolicies, MultiAgentRolloutWorker
from kuberl.trainer.sampling.rollout_worker import WorkerConfig

RELAY = "kuberl_testing.multi_agent_envs:relay_env"


class ParityPolicy:
    """Acts the step's parity (the best action in RelayEnv), so every reward is 1 and returns are known."""

    def __init__(self, observation_space: object, action_space: object, seed: int) -> None:
        self.seed = seed

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return obs[:, 0].astype(np.int64), {"logp": np.zeros(len(obs), np.float32)}

    def set_weights(self, weights: object) -> None: ...


@dataclass(frozen=True)
class ParityFactory:
    def __call__(self, observation_space: object, action_space: object, seed: int) -> ParityPolicy:
        return ParityPolicy(observation_space, action_space, seed)


def relay_worker(policies: list[dict] | None, *, fragment: int = 10, envs: int = 1, id_feature: bool = False,
                 factory: object = None, record_steps: bool = False) -> MultiAgentRolloutWorker:
    config = WorkerConfig(env_id=RELAY, num_envs=envs, fragment_length=fragment, seed=1, record_steps=record_steps)
    return multi_agent_worker(config, policies, id_feature=id_feature, factory=factory)


def multi_agent_worker(config: WorkerConfig, policies: list[dict] | None, *, id_feature: bool = False,
                       factory: object = None) -> MultiAgentRolloutWorker:
    """A worker of `config.env_id` whose policies (`spec.multiAgent.policies`; None: one shared) act with
    `factory`'s (default: the parity policy)."""
    spec = {"algorithm": "ppo", "env": {"id": config.env_id}, "stop": {"timesteps": 10}}
    if policies is not None or id_feature:
        spec["multiAgent"] = {"policies": policies or [], "agentIdFeature": id_feature}
    experiment = validate_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                    "metadata": {"name": "worker"}, "spec": spec})
    spaces = agent_spaces(config.env_id)
    policy_map = PolicyMap.build(experiment.spec, spaces)
    factories = dict.fromkeys(policy_map.names, factory or ParityFactory())
    return MultiAgentRolloutWorker(config, MultiAgentPolicies(policy_map, factories, policy_map.spaces(spaces)))
