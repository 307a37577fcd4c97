"""Multi-agent training: one learner per policy, fed by its own agents' experience.

`MultiAgentAlgorithm` is the `Algorithm` of a PettingZoo env: its rollout workers (`MultiAgentWorkerSet`) step
every agent of every env and hand back one batch per policy; each policy in `policiesToTrain` learns from its
batch with the single-agent algorithm's own learner loop, one per policy (`MultiAgentPPO`: `PPOLoop`;
`MultiAgentVTrace`: `VTraceLoop`, IMPALA's or APPO's, buffer and batch reuse included); a shared policy learns
from all of its agents at once. The team
return (the sum over agents of an episode) is `episodeReturnMean`; results also carry each policy's and each
agent's return mean. Checkpoints hold every policy's learner under `policies/NAME/`.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from torch import nn

from kuberl.api.hyperparams import CommonParams, IMPALAParams, PPOParams
from kuberl.api.multiagent import policies_to_train, policy_params
from kuberl.trainer.algorithms.base import RETURN_WINDOW, Algorithm, evaluation_statistics
from kuberl.trainer.algorithms.policy_loop import PolicyLearner, PolicyLoop
from kuberl.trainer.algorithms.ppo_loop import PPOLoop
from kuberl.trainer.algorithms.vtrace_loop import VTraceLoop, learn_for, vtrace_learner
from kuberl.trainer.distributed.fragment_queue import FragmentQueue
from kuberl.trainer.iteration_result import LearnerStats, PolicyResult, StepResult
from kuberl.trainer.learning.schedules import OptimizerRates, optimizer_rates, set_optimizer_rates
from kuberl.trainer.models.encoders import EncoderSpec
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
from kuberl.trainer.sampling.episode_records import EpisodeRecord
from kuberl.trainer.sampling.policies import PolicyHeadFactory, PPOPolicyFactory
from kuberl.trainer.sampling.rollout_worker import SampleBatch

POLICIES_FOLDER = "policies"
MULTI_AGENT_FILE = "multiagent.json"
P = TypeVar("P", bound=CommonParams)


def _mean(values: deque[float]) -> float | None:
    return float(np.mean(values)) if values else None


class MultiAgentAlgorithm(Algorithm):
    """What every multi-agent algorithm shares: the policy map, the per-policy learner loops, windows and state."""

    loops: Mapping[str, PolicyLoop]  # every policy's, trained or not

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
    def record_episodes(self, records: list[EpisodeRecord]) -> None:
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

    def policy_setups(self, params_type: type[P]) -> Iterator[tuple[str, P, tuple[gym.Space, gym.Space]]]:
        """Each policy's name, hyperparameters and (observation, action) spaces, for `setup` to build its loop."""
        for name in self.policy_map.names:
            p = self.policy_hyperparams[name]
            assert isinstance(p, params_type)
            yield name, p, self.policy_spaces[name]

    @property
    def learners(self) -> dict[str, PolicyLearner]:
        return {name: loop.learner for name, loop in self.loops.items()}

    def learning_rates(self) -> dict[str, OptimizerRates]:
        """Each policy's learner's rates: its optimizer was built with the policy's own hyperparameters."""
        return {name: optimizer_rates(learner) for name, learner in self.learners.items()}

    def set_learning_rates(self, rates: dict[str, OptimizerRates]) -> None:
        for name, learner in self.learners.items():
            if name in rates:
                set_optimizer_rates(learner, rates[name])

    def worker_weights(self) -> dict[str, dict[str, np.ndarray]]:
        return {name: loop.worker_weights() for name, loop in self.loops.items()}

    # -- acting ------------------------------------------------------------------------------------
    def actor(self, policy: str) -> nn.Module:
        """The policy's actor network (a module with `greedy` and `distribution`/`sample`)."""
        return self.loops[policy].actor

    def compute_policy_actions(self, policy: str, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return self.loops[policy].compute_actions(obs, explore)

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
        return self.loops[getattr(self, "selected_policy", self.policy_map.names[0])].policy_module()

    # -- state ---------------------------------------------------------------------------------------
    def learner_state(self) -> dict[str, bytes]:
        files = {f"{POLICIES_FOLDER}/{name}/{file}": data
                 for name, loop in self.loops.items() for file, data in loop.state_files().items()}
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
        for name, loop in self.loops.items():
            prefix = f"{POLICIES_FOLDER}/{name}/"
            loop.load_state_files({key[len(prefix):]: data for key, data in files.items() if key.startswith(prefix)})
        self.agent_windows = {agent: deque(values, maxlen=RETURN_WINDOW)
                              for agent, values in saved.get("agentWindows", {}).items()}
        for name, values in saved.get("policyWindows", {}).items():
            if name in self.policy_windows:
                self.policy_windows[name] = deque(values, maxlen=RETURN_WINDOW)


class MultiAgentPPO(MultiAgentAlgorithm):
    """PPO per policy (`PPOLoop`, as single-agent PPO's), on synchronous multi-agent sampling."""

    loops: dict[str, PPOLoop]

    def setup(self) -> None:
        self.loops, factories = {}, {}
        for name, p, spaces in self.policy_setups(PPOParams):
            self.loops[name] = PPOLoop.build(spaces, p, self.device, self.np_random, self.spec.learner.bf16)
            factories[name] = PPOPolicyFactory.from_params(p, self.sampling_device())
        self.sampler = self.multi_agent_sampler(factories)
        self.sync_weights()

    def training_step(self) -> StepResult:
        batches, sample_seconds = self.collect_multi_agent()
        env_steps = sum(b.env_steps for b in batches)
        stats: dict[str, dict[str, float]] = {}
        for name in self.trained:
            loop, policy_batches = self.loops[name], self.policy_batches(batches, name)
            if policy_batches:
                self.anneal(loop.learner, env_steps)
                stats[name] = loop.learn(policy_batches)
        self.sync_weights()
        return self.multi_agent_result(batches, stats, sample_seconds)


class MultiAgentVTrace(MultiAgentAlgorithm):
    """IMPALA or APPO per policy: rollout workers sample without waiting into IMPALA's bounded `FragmentQueue`
    (in-process with `rollouts.workers: 0`), and each trained policy learns from its columns of the fragments with
    single-agent IMPALA's learner loop (`VTraceLoop`: train batches of `trainBatchSize` steps, `bufferBatches` of
    them kept, each used `batchReuse` times, weights out every `broadcastInterval` updates). V-trace corrects for
    the workers' lag, reported per iteration in policy versions (`learner.policyLagMean`, `policyLagMax`)."""

    loops: dict[str, VTraceLoop]

    def setup(self) -> None:
        self.loops, factories = {}, {}
        for name, p, spaces in self.policy_setups(IMPALAParams):
            self.loops[name] = VTraceLoop(vtrace_learner(spaces, p, self.device, self.spec.learner.bf16),
                                          self.np_random)
            factories[name] = PolicyHeadFactory(EncoderSpec.from_params(p))
        params = self.params
        assert isinstance(params, IMPALAParams)
        policies = MultiAgentPolicies(self.policy_map, factories, self.policy_spaces)
        self.sampler = FragmentQueue(self.worker_config(), policies, self.spec.rollouts.workers,
                                     queue_size=params.learner_queue_size,
                                     requests_per_worker=params.requests_per_worker,
                                     worker_set=MultiAgentWorkerSet)
        self.sync_weights()

    def sync_weights(self) -> None:
        super().sync_weights()
        for loop in self.loops.values():
            loop.published(self.policy_version)

    def training_step(self) -> StepResult:
        p = self.params
        assert isinstance(p, IMPALAParams) and isinstance(self.sampler, FragmentQueue)
        trained = [self.loops[name] for name in self.trained]
        for loop in trained:
            self.anneal(loop.learner)
        iteration = learn_for(self, trained, self._route, p.min_iteration_seconds)
        stats = {name: figures for name in self.trained
                 if (figures := self.loops[name].statistics(iteration)) is not None}
        result = self.multi_agent_result(iteration.fragments, stats, iteration.seconds)
        lags = [lag for loop in trained for lag in loop.tally.lags]
        lag = {"policyLagMean": float(np.mean(lags)), "policyLagMax": int(np.max(lags))} if lags else {}
        assert result.learner is not None
        return replace(result, learner=LearnerStats({**result.learner.figures, **lag}),
                       sampler={**result.sampler, "queueSize": self.sampler.queue_size})

    def _route(self, fragment: MultiAgentSampleBatch) -> list[tuple[VTraceLoop, SampleBatch]]:
        """Each trained policy's columns of a fragment, to its loop."""
        return [(self.loops[name], fragment.policy_batches[name]) for name in self.trained
                if name in fragment.policy_batches]


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
