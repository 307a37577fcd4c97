"""SAC (algorithm "sac": Soft Actor-Critic, Haarnoja et al. 2018, with automatic entropy tuning). Continuous
(bounded Box) actions only.

The losses and the update (`SACLearner`) read top to bottom in `kuberl.trainer.learners.sac`; this module
wires the learner to the rollout workers and to replay.

Replay lives where the registry's `placement` says (`kuberl.api.algorithms`):

- local (`SAC`; `replay.shards` unset or 0, or no rollout workers): each iteration runs like DQN's: sample one
  fragment from every worker (uniform random actions until `learning_starts` env steps), add its n-step
  transitions to replay in the compact form, then run `replay_ratio` learner updates per env step and send
  the new priorities back (`kuberl.trainer.replay.local`).
- shards (`ShardedSAC`; `replay.shards` >= 1 with rollout workers): Ape-X's topology
  (`kuberl.trainer.algorithms.sharded`): the workers sample with the squashed Gaussian actor into replay
  shards, the learner actor runs `SACLearner.update` on batches from every shard and sends priorities back.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import torch
from torch import nn

from kuberl.api.algorithms import REGISTRY
from kuberl.api.hyperparams import SACParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.sharded import ShardedReplay
from kuberl.trainer.iteration_result import LearnerStats, StepResult
from kuberl.trainer.learners.sac import build_sac_learner
from kuberl.trainer.learning.device import obs_tensor
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.greedy import GreedyActor
from kuberl.trainer.models.sac_networks import SquashedGaussianActor
from kuberl.trainer.replay.local import LocalReplay
from kuberl.trainer.sampling.policies import SACPolicyFactory
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.worker_set import WorkerSet

SCHEDULE_FILE = "sac_schedule.json"


class SACConfig(AlgorithmConfig):
    algorithm = "sac"

    def algorithm_class(self) -> type[SAC] | type[ShardedSAC]:
        spec = self.experiment.spec
        if REGISTRY[self.algorithm].placement(spec.rollouts.workers, spec.replay.shards) == "shards":
            return ShardedSAC
        return SAC


def actor_actions(actor: SquashedGaussianActor, obs: np.ndarray, explore: bool, device: torch.device) -> np.ndarray:
    """Actions for a batch of filtered observations: sampled when exploring, else the squashed mean."""
    with torch.no_grad():
        obs_t = obs_tensor(obs, device)
        actions = actor.sample(obs_t)[0] if explore else actor.greedy(obs_t)
    return actions.cpu().numpy().reshape(len(obs), *actor.action_shape)


# -- the algorithm --------------------------------------------------------------------------------
class SAC(Algorithm):
    params: SACParams
    sampler: WorkerSet | None

    def setup(self) -> None:
        params = self.params
        self.learner = build_sac_learner(self.observation_space, self.action_space, params, self.device,
                                         bf16=self.spec.learner.bf16)
        self.local_replay = LocalReplay(self.spec, params, self.observation_space, self.frame_stack)
        encoder = EncoderSpec.from_params(params)
        self.sampler = WorkerSet(self.worker_config(), SACPolicyFactory(encoder), self.spec.rollouts.workers)
        self.sync_weights()

    # -- one iteration ----------------------------------------------------------------------------
    def training_step(self) -> StepResult:
        assert self.sampler is not None
        self.sampler.configure_policies(PolicySettings(uniform=self.timesteps < self.params.learning_starts))
        batches = self.collect()
        env_steps = sum(b.env_steps for b in batches)
        self.local_replay.add(batches)
        updates = self.local_replay.train(self.timesteps + env_steps, env_steps, self.learner.update)
        if updates:
            self.sync_weights()
        learner = {**self.learner.take_stats(), "updatesThisIteration": updates}
        return StepResult(env_steps, learner=LearnerStats(learner), replay=self.local_replay.stats())

    # -- the Algorithm contract -------------------------------------------------------------------
    def worker_weights(self) -> dict[str, np.ndarray]:
        return self.learner.weights()

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return actor_actions(self.learner.actor, obs, explore, self.device)

    def policy_module(self) -> nn.Module:
        return GreedyActor(copy.deepcopy(self.learner.actor).cpu().eval())

    def learner_state(self) -> dict[str, bytes]:
        files = self.learner.state_files()
        files[SCHEDULE_FILE] = json.dumps(self.local_replay.schedule()).encode()
        return files

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.learner.load_state_files(files)
        if SCHEDULE_FILE in files:
            self.local_replay.restore_schedule(json.loads(files[SCHEDULE_FILE]))


class ShardedSAC(ShardedReplay[SquashedGaussianActor]):
    """SAC on replay shards: the workers' squashed Gaussian actors (uniform until `learning_starts` env steps)
    add to the shards, which give new transitions their largest priority (the workers have no critics to
    score them with); the learner actor runs `SACLearner.update` and sends `sac_priorities` back."""

    params: SACParams
    learner_builder = staticmethod(build_sac_learner)

    def make_policy_factory(self) -> SACPolicyFactory:
        return SACPolicyFactory(EncoderSpec.from_params(self.params))

    def sampling_settings(self, position: int, timesteps: int) -> PolicySettings:
        return PolicySettings(uniform=timesteps < self.params.learning_starts)

    def local_model(self) -> SquashedGaussianActor:
        return SquashedGaussianActor(self.observation_space, self.action_space, EncoderSpec.from_params(self.params))

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return actor_actions(self.refreshed_local_model(), obs, explore, torch.device("cpu"))

    def policy_module(self) -> nn.Module:
        return GreedyActor(copy.deepcopy(self.refreshed_local_model()).eval())
