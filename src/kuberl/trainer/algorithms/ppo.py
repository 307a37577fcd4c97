"""Proximal Policy Optimisation (Schulman et al., 2017): synchronous sampling and `PPOLearner`.

Each iteration samples every rollout worker once (`WorkerSet`: in the learner's process when
`rollouts.workers` is 0, with an image policy on the learner's GPU where there is one), turns the fragments
into the learner's batch, anneals the learning rate, runs the learner's epochs and publishes the new
weights. The loss and the update read top to bottom in `kuberl.trainer.learners.ppo`.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import PPOParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.iteration_result import LearnerStats, StepResult
from kuberl.trainer.learners.ppo import PPOLearner
from kuberl.trainer.learning.device import obs_tensor
from kuberl.trainer.models.actor_critic import ActorCritic
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.greedy import GreedyActor
from kuberl.trainer.models.weights import state_dict_to_numpy
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
        model = ActorCritic(self.observation_space, self.action_space, p.hidden, p.activation, EncoderSpec.from_params(p))
        self.learner = PPOLearner(model, p, self.device, self.np_random, bf16=self.spec.learner.bf16)
        self.sampler = WorkerSet(self.worker_config(), PPOPolicyFactory.from_params(p, self.sampling_device()),
                                 self.spec.rollouts.workers)
        self.sync_weights()

    @property
    def model(self) -> ActorCritic:
        return self.learner.model

    def worker_weights(self) -> dict[str, np.ndarray]:
        return state_dict_to_numpy(self.model.actor)

    def evaluation_policy(self) -> tuple[PPOPolicyFactory, dict[str, np.ndarray]]:
        """Evaluation actors act on their own CPUs, even where sampling runs on the learner's GPU."""
        return PPOPolicyFactory.from_params(self.params), self.worker_weights()

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> StepResult:
        started = time.perf_counter()
        batches = self.collect()
        sample_seconds = time.perf_counter() - started
        env_steps = sum(b.env_steps for b in batches)
        batch = self.learner.learner_batch(batches)
        self.anneal(self.learner, env_steps)
        learning = time.perf_counter()
        learner_stats = self.learner.update(batch)
        learner_stats["updateSeconds"] = time.perf_counter() - learning
        self.sync_weights()
        return StepResult(env_steps, learner=LearnerStats(learner_stats), sampler={
            "envStepsPerSecond": env_steps / sample_seconds if sample_seconds > 0 else 0.0,
            "sampleSeconds": sample_seconds,
            "envSeconds": sum(b.env_seconds for b in batches),
            "batches": len(batches),
        })

    # -- acting and state ------------------------------------------------------------------------
    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            obs_t = obs_tensor(obs, self.device)
            actor = self.model.actor
            actions = actor.distribution(obs_t).sample() if explore else actor.greedy(obs_t)
        return actions.cpu().numpy()

    def policy_module(self) -> nn.Module:
        return GreedyActor(copy.deepcopy(self.model.actor).cpu().eval())

    def learner_state(self) -> dict[str, bytes]:
        return self.learner.state_files()

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.learner.load_state_files(files)


__all__ = ["PPO", "PPOConfig"]
