"""Which policy acts for which agent in the trainer, and the observation each policy sees.

A `PolicyMap` is built once from `spec.multiAgent` and the env's possible agents and travels to rollout workers
(it pickles). Agents that appear later under ids the env did not list are mapped by the same rule
(`kuberl.api.multiagent.policy_for`). With `agentIdFeature`, a policy's observation is the agent's own with a
one-hot of the agent's index among the policy's agents appended.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from kuberl.api.multiagent import policies_of, policy_for
from kuberl.api.types import PolicySpec, RLExperimentSpec
from kuberl.trainer.multiagent.envs import AgentSpaces


class UnmappedAgent(RuntimeError):
    """An agent appeared that no policy serves."""


@dataclass(frozen=True)
class PolicyMap:
    policies: tuple[PolicySpec, ...]
    agents_of: dict[str, tuple[str, ...]]  # policy -> the env's possible agents it serves, in the env's order
    id_feature: bool = False

    @classmethod
    def build(cls, spec: RLExperimentSpec, spaces: AgentSpaces) -> PolicyMap:
        policies = tuple(policies_of(spec))
        agents_of: dict[str, list[str]] = {policy.name: [] for policy in policies}
        for agent in spaces.agents:
            name = policy_for(agent, policies)
            if name is not None:
                agents_of[name].append(agent)
        id_feature = spec.multi_agent is not None and spec.multi_agent.agent_id_feature
        return cls(policies, {name: tuple(agents) for name, agents in agents_of.items()}, id_feature)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(policy.name for policy in self.policies)

    def policy(self, agent: str) -> str:
        name = policy_for(agent, self.policies)
        if name is None:
            raise UnmappedAgent(f"agent {agent!r} appeared, but no policy in spec.multiAgent.policies serves it")
        return name

    def id_width(self, policy: str) -> int:
        return len(self.agents_of[policy]) if self.id_feature else 0

    def agent_index(self, policy: str, agent: str) -> int:
        agents = self.agents_of[policy]
        if agent not in agents:
            raise UnmappedAgent(f"agent {agent!r} is not among the env's possible agents, so the agent-id feature "
                                f"of policy {policy!r} has no place for it")
        return agents.index(agent)

    def observation(self, policy: str, agent: str, obs: np.ndarray) -> np.ndarray:
        """The observation `policy` acts on for `agent`: its own, with the one-hot agent id where configured."""
        width = self.id_width(policy)
        if not width:
            return obs
        one_hot = np.zeros(width, dtype=np.float32)
        one_hot[self.agent_index(policy, agent)] = 1.0
        return np.concatenate([np.asarray(obs, dtype=np.float32).reshape(-1), one_hot])

    def observation_space(self, policy: str, agent_space: gym.Space) -> gym.Space:
        width = self.id_width(policy)
        if not width:
            return agent_space
        assert isinstance(agent_space, gym.spaces.Box) and len(agent_space.shape) == 1
        low = np.concatenate([agent_space.low.astype(np.float32), np.zeros(width, np.float32)])
        high = np.concatenate([agent_space.high.astype(np.float32), np.ones(width, np.float32)])
        return gym.spaces.Box(low, high, dtype=np.float32)

    def spaces(self, env_spaces: AgentSpaces) -> dict[str, tuple[gym.Space, gym.Space]]:
        """policy -> (observation space, action space) its networks are built for: its first agent's."""
        result = {}
        for name, agents in self.agents_of.items():
            first = agents[0]
            result[name] = (self.observation_space(name, env_spaces.observation_spaces[first]),
                            env_spaces.action_spaces[first])
        return result


__all__ = ["PolicyMap", "UnmappedAgent"]
