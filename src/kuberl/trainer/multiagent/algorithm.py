"""Multi-agent training: one learner per policy, fed by its own agents' experience.

`MultiAgentAlgorithm` is the `Algorithm` of a PettingZoo env: its rollout workers (`MultiAgentWorkerSet`) step
every agent of every env and hand back one batch per policy; each policy in `policiesToTrain` learns from its
batch with the single-agent learner of the algorithm (`MultiAgentPPO`: `PPOLearner`; `MultiAgentVTrace`:
`VTraceLearner` with IMPALA's or APPO's loss); a shared policy learns from all of its agents at once. The team
return (the sum over agents of an episode) is `episodeReturnMean`; results also carry each policy's and each
agent's return mean. Checkpoints hold every policy's learner under `policies/NAME/`.
"""

from __future__ import annotations

import copy
import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import CommonParams, IMPALAParams, PPOParams
from kuberl.api.multiagent import policies_to_train, policy_params
from kuberl.trainer.algorithms.base import RETURN_WINDOW, Algorithm, evaluation_statistics
from kuberl.trainer.distributed.fragment_queue import FragmentQueue
from kuberl.trainer.iteration_result import LearnerStats, PolicyResult, StepResult
from kuberl.trainer.learners.ppo import PPOLearner
from kuberl.trainer.learners.vtrace import VTraceLearner, appo_loss, impala_loss
from kuberl.trainer.learning.device import obs_tensor, to_device
from kuberl.trainer.models.actor_critic import ActorCritic
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.greedy import GreedyActor
from kuberl.trainer.models.policy_value import PolicyValueNet
from kuberl.trainer.models.weights import state_dict_to_numpy
from kuberl.trainer.multiagent.envs import AgentSpaces, agent_spaces
from kuberl.trainer.multiagent.episodes import (
    MultiAgentEvaluationWorker,
    PlayedMultiAgentEpisodes,
    agent_means,
    play_multi_agent,
)
from kuberl.trainer.multiagent.policy_map import PolicyMap
from kuberl.trainer.multiagent.rollout_worker import (
    MultiAgentPolicies,
    MultiAgentSampleBatch,
    MultiAgentWorkerSet,
)
from kuberl.trainer.sampling.envs import EnvSpaces
from kuberl.trainer.sampling.policies import PolicyHeadFactory, PPOPolicyFactory
from kuberl.trainer.sampling.rollout_worker import SampleBatch

POLICIES_FOLDER = "policies"
MULTI_AGENT_FILE = "multiagent.json"
P = TypeVar("P", bound=CommonParams)
VTRACE_KEYS = ("obs", "next_obs", "actions", "rewards", "terminateds", "truncateds", "valid", "logp")


def _mean(values: deque[float]) -> float | None:
    return float(np.mean(values)) if values else None


class MultiAgentAlgorithm(Algorithm):
    """What every multi-agent algorithm shares: the policy map, the per-policy learners, windows and state."""

    learners: dict[str, Any]

    def spaces(self) -> EnvSpaces:
        env = self.env_settings
        self.env_agents: AgentSpaces = agent_spaces(env.id, env.config, env.wrappers)
        self.policy_map = PolicyMap.build(self.spec, self.env_agents)
        self.policy_spaces = self.policy_map.spaces(self.env_agents)
        self.policy_hyperparams: dict[str, CommonParams] = {
            policy.name: policy_params(self.experiment, policy) for policy in self.policy_map.policies}
        self.trained = policies_to_train(self.spec)
        self.agent_windows: dict[str, deque[float]] = {}
        self.policy_windows: dict[str, deque[float]] = {name: deque(maxlen=RETURN_WINDOW)
                                                         for name in self.policy_map.names}
        observation_space, action_space = self.policy_spaces[self.policy_map.names[0]]
        return EnvSpaces(observation_space, action_space)

    def multi_agent_sampler(self, factories: dict[str, Any]) -> MultiAgentWorkerSet:
        policies = MultiAgentPolicies(self.policy_map, factories, self.policy_spaces)
        return MultiAgentWorkerSet(self.worker_config(), policies, self.spec.rollouts.workers)

    # -- episodes and results ----------------------------------------------------------------------
    def record_episodes(self, records: list[dict[str, Any]]) -> None:
        super().record_episodes(records)
        for record in records:
            for agent, played in record.get("agents", {}).items():
                self.agent_windows.setdefault(agent, deque(maxlen=RETURN_WINDOW)).append(played["return"])
                self.policy_windows[played["policy"]].append(played["return"])

    def forget_episodes(self) -> None:
        super().forget_episodes()
        self.agent_windows.clear()
        for window in self.policy_windows.values():
            window.clear()

    def collect_multi_agent(self) -> tuple[list[MultiAgentSampleBatch], float]:
        started = time.perf_counter()
        batches: list[MultiAgentSampleBatch] = self.collect()  # type: ignore[assignment]
        return batches, time.perf_counter() - started

    def multi_agent_result(self, batches: list[MultiAgentSampleBatch], learner_stats: dict[str, dict[str, float]],
                           sample_seconds: float) -> StepResult:
        env_steps = sum(b.env_steps for b in batches)
        agent_steps = {name: sum(b.agent_steps.get(name, 0) for b in batches) for name in self.policy_map.names}
        policies = {
            name: PolicyResult(_mean(self.policy_windows[name]), agent_steps[name], name in self.trained,
                               LearnerStats(learner_stats[name]) if name in learner_stats else None)
            for name in self.policy_map.names
        }
        return StepResult(
            env_steps,
            agent_steps=sum(agent_steps.values()),
            learner=LearnerStats({"updatesTotal": sum(int(s.get("updatesTotal", 0)) for s in learner_stats.values())}),
            policies=policies,
            agents={agent: _mean(window) for agent, window in self.agent_windows.items()},
            sampler={
                "envStepsPerSecond": env_steps / sample_seconds if sample_seconds > 0 else 0.0,
                "sampleSeconds": sample_seconds,
                "envSeconds": sum(b.env_seconds for b in batches),
                "batches": len(batches),
            },
        )

    @staticmethod
    def policy_batches(batches: list[MultiAgentSampleBatch], name: str) -> list[SampleBatch]:
        return [b.policy_batches[name] for b in batches if name in b.policy_batches]

    def policy_setups(self, params_type: type[P]) -> Iterator[tuple[str, P, gym.Space, gym.Space]]:
        """Each policy's name, hyperparameters and (observation, action) spaces, for `setup` to build its learner."""
        for name in self.policy_map.names:
            p = self.policy_hyperparams[name]
            assert isinstance(p, params_type)
            yield name, p, *self.policy_spaces[name]

    def worker_weights(self) -> dict[str, dict[str, np.ndarray]]:
        return {name: state_dict_to_numpy(self.actor(name)) for name in self.learners}

    # -- acting ------------------------------------------------------------------------------------
    def actor(self, policy: str) -> nn.Module:
        """The policy's actor network (a module with `greedy` and `distribution`/`sample`)."""
        raise NotImplementedError

    def compute_policy_actions(self, policy: str, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        raise NotImplementedError

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        """The first policy's actions (a single-agent caller's view); see `compute_policy_actions`."""
        return self.compute_policy_actions(self.policy_map.names[0], obs, explore)

    def act(self, policy: str, agent: str, obs: Any, explore: bool = False) -> Any:
        row = np.asarray(self.policy_map.observation(policy, agent, np.asarray(obs)))
        if row.dtype != np.uint8:
            row = row.astype(np.float32)
        return self.compute_policy_actions(policy, row[None], explore)[0]

    def play(self, seeds: list[int], *, explore: bool = False, env_config: dict[str, Any] | None = None,
             record_first: bool = False) -> PlayedMultiAgentEpisodes:
        env = replace(self.env_settings, config={**self.env_settings.config, **(env_config or {})})
        return play_multi_agent(env, self.policy_map.policy,
                                lambda policy, agent, obs: self.act(policy, agent, obs, explore), seeds,
                                record_first=record_first)

    def evaluation_worker_class(self) -> type:
        return MultiAgentEvaluationWorker

    def evaluate(self, episodes: int = 10, *, explore: bool = False, seed: int | None = None) -> dict[str, Any]:
        played = self.play(self.evaluation_seeds(episodes, seed), explore=explore)
        return {**evaluation_statistics(episodes, played.returns, played.lengths),
                "agents": agent_means(played.agent_returns)}

    @property
    def policy_names(self) -> tuple[str, ...]:
        return self.policy_map.names

    def select_policy(self, policy: str) -> None:
        """Make `policy` the one `policy_module()`, `observation_space` and `action_space` describe (exports)."""
        if policy not in self.policy_spaces:
            raise KeyError(policy)
        self.observation_space, self.action_space = self.policy_spaces[policy]
        self.selected_policy = policy

    def policy_module(self) -> nn.Module:
        """The greedy policy of the selected policy (`select_policy`; the first by default), on the CPU."""
        name = getattr(self, "selected_policy", self.policy_map.names[0])
        return GreedyActor(copy.deepcopy(self.actor(name)).cpu().eval())

    # -- state ---------------------------------------------------------------------------------------
    def learner_state(self) -> dict[str, bytes]:
        files = {f"{POLICIES_FOLDER}/{name}/{file}": data
                 for name, learner in self.learners.items() for file, data in learner.state_files().items()}
        files[MULTI_AGENT_FILE] = json.dumps({
            "policies": list(self.policy_map.names),
            "agents": {name: list(agents) for name, agents in self.policy_map.agents_of.items()},
            "agentWindows": {agent: list(window) for agent, window in self.agent_windows.items()},
            "policyWindows": {name: list(window) for name, window in self.policy_windows.items()},
        }, indent=1).encode()
        return files

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        if MULTI_AGENT_FILE not in files:
            raise ValueError("the checkpoint is not of a multi-agent run")
        saved = json.loads(files[MULTI_AGENT_FILE])
        missing = [name for name in self.policy_map.names if name not in saved["policies"]]
        if missing:
            raise ValueError(f"the checkpoint has no policy {', '.join(map(repr, missing))} "
                             f"(it holds {', '.join(saved['policies'])})")
        for name, learner in self.learners.items():
            prefix = f"{POLICIES_FOLDER}/{name}/"
            learner.load_state_files({key[len(prefix):]: data for key, data in files.items() if key.startswith(prefix)})
        self.agent_windows = {agent: deque(values, maxlen=RETURN_WINDOW)
                              for agent, values in saved.get("agentWindows", {}).items()}
        for name, values in saved.get("policyWindows", {}).items():
            if name in self.policy_windows:
                self.policy_windows[name] = deque(values, maxlen=RETURN_WINDOW)


class MultiAgentPPO(MultiAgentAlgorithm):
    """PPO per policy (`PPOLearner`), on synchronous multi-agent sampling."""

    learners: dict[str, PPOLearner]

    def setup(self) -> None:
        self.learners = {}
        factories = {}
        for name, p, observation_space, action_space in self.policy_setups(PPOParams):
            model = ActorCritic(observation_space, action_space, p.hidden, p.activation, EncoderSpec.from_params(p))
            self.learners[name] = PPOLearner(model, p, self.device, self.np_random, bf16=self.spec.learner.bf16)
            factories[name] = PPOPolicyFactory.from_params(p, self.sampling_device())
        self.sampler = self.multi_agent_sampler(factories)
        self.sync_weights()

    def actor(self, policy: str) -> nn.Module:
        return self.learners[policy].model.actor

    def training_step(self) -> StepResult:
        batches, sample_seconds = self.collect_multi_agent()
        env_steps = sum(b.env_steps for b in batches)
        stats: dict[str, dict[str, float]] = {}
        for name in self.trained:
            learner, policy_batches = self.learners[name], self.policy_batches(batches, name)
            if not policy_batches:
                continue
            self.anneal(learner, env_steps)
            learning = time.perf_counter()
            stats[name] = learner.update(learner.learner_batch(policy_batches))
            stats[name]["updateSeconds"] = time.perf_counter() - learning
        self.sync_weights()
        return self.multi_agent_result(batches, stats, sample_seconds)

    def compute_policy_actions(self, policy: str, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            obs_t = obs_tensor(obs, self.device)
            actor = self.actor(policy)
            actions = actor.distribution(obs_t).sample() if explore else actor.greedy(obs_t)
        return actions.cpu().numpy()


class MultiAgentVTrace(MultiAgentAlgorithm):
    """IMPALA or APPO per policy (`VTraceLearner`): rollout workers sample without waiting into IMPALA's bounded
    `FragmentQueue` (in-process with `rollouts.workers: 0`); every fragment that arrives is split by policy, and
    each trained policy learns from its columns in train batches of about `trainBatchSize` rows, each used
    `batchReuse` times. Weights go out after each fragment learned from; V-trace corrects for the workers' lag,
    reported per iteration in policy versions (`learner.policyLagMean`, `policyLagMax`)."""

    learners: dict[str, VTraceLearner]
    appo = False

    def setup(self) -> None:
        self.learners = {}
        factories = {}
        for name, p, observation_space, action_space in self.policy_setups(IMPALAParams):
            model = PolicyValueNet(observation_space, action_space, EncoderSpec.from_params(p))
            target_interval = getattr(p, "target_update_interval", None) if self.appo else None
            self.learners[name] = VTraceLearner(model, p, self.device, loss=appo_loss if self.appo else impala_loss,
                                                target_update_interval=target_interval, bf16=self.spec.learner.bf16)
            factories[name] = PolicyHeadFactory(EncoderSpec.from_params(p))
        p = self.params
        assert isinstance(p, IMPALAParams)
        policies = MultiAgentPolicies(self.policy_map, factories, self.policy_spaces)
        self.sampler = FragmentQueue(self.worker_config(), policies, self.spec.rollouts.workers,
                                     queue_size=p.learner_queue_size, requests_per_worker=p.requests_per_worker,
                                     worker_set=MultiAgentWorkerSet)
        self.sync_weights()

    def actor(self, policy: str) -> nn.Module:
        return self.learners[policy].model.policy

    def training_step(self) -> StepResult:
        p = self.params
        assert isinstance(p, IMPALAParams)
        for name in self.trained:
            self.anneal(self.learners[name])
        started = time.perf_counter()
        deadline = started + p.min_iteration_seconds
        learned = False
        batches: list[MultiAgentSampleBatch] = []
        sums: dict[str, dict[str, float]] = {}
        lags: list[int] = []
        while True:
            arrived: list[MultiAgentSampleBatch] = self.sampler.poll(timeout=0.05)  # type: ignore[assignment]
            for batch in arrived:
                self.record_episodes(batch.episodes)
            batches.extend(arrived)
            for fragment in self.sampler.take(len(self.sampler.queue)):  # type: ignore[attr-defined]
                lags.append(self.policy_version - fragment.policy_version)
                for name in self.trained:
                    if name in fragment.policy_batches:
                        for key, value in self._learn(self.learners[name], fragment.policy_batches[name]).items():
                            sums.setdefault(name, {})[key] = sums.get(name, {}).get(key, 0.0) + value
                        learned = True
                self.sync_weights()
            if learned and time.perf_counter() >= deadline:
                break
        stats: dict[str, dict[str, float]] = {}
        for name, totals in sums.items():
            learner, updates = self.learners[name], int(totals.pop("updates"))
            stats[name] = {key: value / updates for key, value in totals.items()}
            stats[name].update(updates=updates, updatesTotal=learner.updates,
                               lr=learner.optimizer.param_groups[0]["lr"])
        result = self.multi_agent_result(batches, stats, time.perf_counter() - started)
        assert result.learner is not None
        return replace(
            result, learner=LearnerStats({**result.learner.figures, "policyLagMean": float(np.mean(lags)),
                                          "policyLagMax": int(np.max(lags))}),
            sampler={**result.sampler, "queueSize": self.sampler.queue_size})  # type: ignore[attr-defined]

    def _learn(self, learner: VTraceLearner, batch: SampleBatch) -> dict[str, float]:
        """One fragment of the policy's columns, in train batches of about `trainBatchSize` rows (whole columns:
        a trace never crosses a cut), each learned from `batchReuse` times; the sums of its statistics."""
        p = learner.params
        assert isinstance(p, IMPALAParams)
        arrays = {key: batch.data[key] for key in VTRACE_KEYS}
        arrays["dones"] = arrays["terminateds"] | arrays["truncateds"] | ~arrays["valid"]
        length, width = arrays["rewards"].shape
        columns = max(1, p.train_batch_size // length)
        sums: dict[str, float] = {"updates": 0.0}
        for first in range(0, width, columns):
            tensors = to_device({key: value[:, first:first + columns] for key, value in arrays.items()}, self.device)
            for _ in range(p.batch_reuse):
                for key, value in learner.update(tensors).items():
                    sums[key] = sums.get(key, 0.0) + value
                sums["updates"] += 1
        return sums

    def compute_policy_actions(self, policy: str, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            actions, _ = self.actor(policy).sample(torch.as_tensor(obs, device=self.device), explore)
        return actions.cpu().numpy()


class MultiAgentAPPO(MultiAgentVTrace):
    appo = True


ALGORITHMS: dict[str, type[MultiAgentAlgorithm]] = {"ppo": MultiAgentPPO, "impala": MultiAgentVTrace,
                                                    "appo": MultiAgentAPPO}
UNSUPPORTED = {
    "dqn": "Q-learning of several agents needs a replay per policy, which kuberl does not keep yet",
    "apex-dqn": "Q-learning of several agents needs a replay per policy, which kuberl does not keep yet",
    "sac": "SAC of several agents needs a replay per policy, which kuberl does not keep yet",
}


def multi_agent_algorithm_class(algorithm: str) -> type[MultiAgentAlgorithm]:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"{algorithm} does not train multi-agent envs: "
                         f"{UNSUPPORTED.get(algorithm, 'not supported')}; use {', '.join(ALGORITHMS)}")
    return ALGORITHMS[algorithm]


__all__ = ["ALGORITHMS", "MultiAgentAPPO", "MultiAgentAlgorithm", "MultiAgentPPO", "MultiAgentVTrace",
           "multi_agent_algorithm_class"]
