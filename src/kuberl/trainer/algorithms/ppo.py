"""Proximal Policy Optimisation (Schulman et al., 2017): synchronous sampling and `PPOLearner`.

Each iteration samples every rollout worker once (`WorkerSet`: in the learner's process when
`rollouts.workers` is 0, with an image policy on the learner's GPU where there is one), turns the fragments
into the learner's batch, anneals the learning rate, runs the learner's epochs and publishes the new
weights. The loss and the update read top to bottom in `kuberl.trainer.learners.ppo`; the learning of one
iteration is `kuberl.trainer.algorithms.ppo_loop`'s, which a multi-agent run's PPO runs once per policy.
"""

from __future__ import annotations

import time

import numpy as np
from torch import nn

from kuberl.api.hyperparams import PPOParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.ppo_loop import PPOLoop
from kuberl.trainer.iteration_result import LearnerStats, StepResult
from kuberl.trainer.learners.ppo import PPOLearner
from kuberl.trainer.models.actor_critic import ActorCritic
from kuberl.trainer.sampling.policies import PPOPolicyFactory
from kuberl.trainer.sampling.worker_set import WorkerSet


class PPOConfig(AlgorithmConfig):
    algorithm = "ppo"

    def algorithm_class(self) -> type[PPO]:
        return PPO


class PPO(Algorithm):
    params: PPOParams

    def setup(self) -> None:
        p = self.params
        self.loop = PPOLoop.build((self.observation_space, self.action_space), p, self.device, self.np_random,
                                  self.spec.learner.bf16)
        self.sampler = WorkerSet(self.worker_config(), PPOPolicyFactory.from_params(p, self.sampling_device()),
                                 self.spec.rollouts.workers)
        self.sync_weights()

    @property
    def learner(self) -> PPOLearner:
        return self.loop.learner

    @property
    def model(self) -> ActorCritic:
        return self.learner.model

    def worker_weights(self) -> dict[str, np.ndarray]:
        return self.loop.worker_weights()

    def evaluation_policy(self) -> tuple[PPOPolicyFactory, dict[str, np.ndarray]]:
        """Evaluation actors act on their own CPUs, even where sampling runs on the learner's GPU."""
        return PPOPolicyFactory.from_params(self.params), self.worker_weights()

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> StepResult:
        started = time.perf_counter()
        batches = self.collect()
        sample_seconds = time.perf_counter() - started
        env_steps = sum(b.env_steps for b in batches)
        self.anneal(self.learner, env_steps)
        learner_stats = self.loop.learn(batches)
        self.sync_weights()
        return StepResult(env_steps, learner=LearnerStats(learner_stats), sampler={
            "envStepsPerSecond": env_steps / sample_seconds if sample_seconds > 0 else 0.0,
            "sampleSeconds": sample_seconds,
            "envSeconds": sum(b.env_seconds for b in batches),
            "batches": len(batches),
        })

    # -- acting and state ------------------------------------------------------------------------
    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return self.loop.compute_actions(obs, explore)

    def policy_module(self) -> nn.Module:
        return self.loop.policy_module()

    def learner_state(self) -> dict[str, bytes]:
        return self.loop.state_files()

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.loop.load_state_files(files)


__all__ = ["PPO", "PPOConfig"]
