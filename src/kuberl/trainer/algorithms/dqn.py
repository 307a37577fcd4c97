"""DQN (algorithm "dqn", Mnih et al. 2015, with double Q, dueling and prioritized replay).

The loss and the update (`QLearner`) read top to bottom in `kuberl.trainer.learners.q`; Ape-X
(`kuberl.trainer.algorithms.apex`) runs the same learner in an actor.

Each iteration: set the workers' epsilon from the schedule, sample one fragment from every
worker, turn it into n-step transitions in the compact form (`kuberl.trainer.replay.frames`:
frames stored once, in their own dtype), add them to replay (new transitions get the largest
priority seen), then run `replay_ratio` learner updates per env step once `learning_starts`
env steps are in, and send the new priorities back to the buffer (`kuberl.trainer.replay.local`).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import DQNParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.iteration_result import LearnerStats, StepResult
from kuberl.trainer.learners.q import QLearner
from kuberl.trainer.learning.device import obs_tensor
from kuberl.trainer.learning.schedules import linear_schedule
from kuberl.trainer.models.greedy import GreedyQ
from kuberl.trainer.models.q_network import build_q_network
from kuberl.trainer.replay.local import LocalReplay
from kuberl.trainer.sampling.policies import QPolicyFactory
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.worker_set import WorkerSet

SCHEDULE_FILE = "dqn_schedule.json"


class DQNConfig(AlgorithmConfig):
    algorithm = "dqn"

    def algorithm_class(self) -> type[DQN]:
        return DQN


# -- the algorithm --------------------------------------------------------------------------------
class DQN(Algorithm):
    params: DQNParams
    sampler: WorkerSet | None

    def setup(self) -> None:
        params = self.params
        self.learner = QLearner(build_q_network(self.observation_space, self.action_space, params), params, self.device,
                                bf16=self.spec.learner.bf16)
        self.local_replay = LocalReplay(self.spec, params, self.observation_space, self.frame_stack)
        self.sampler = WorkerSet(self.worker_config(), QPolicyFactory.from_params(params), self.spec.rollouts.workers)
        self.sync_weights()

    # -- schedules --------------------------------------------------------------------------------
    def epsilon(self, timesteps: int | None = None) -> float:
        p = self.params
        return linear_schedule(self.timesteps if timesteps is None else timesteps, p.epsilon_start, p.epsilon_end,
                               p.epsilon_timesteps)

    # -- one iteration ----------------------------------------------------------------------------
    def training_step(self) -> StepResult:
        assert self.sampler is not None
        epsilon = self.epsilon()
        self.sampler.configure_policies(PolicySettings(epsilon=epsilon))
        batches = self.collect()
        env_steps = sum(b.env_steps for b in batches)
        self.local_replay.add(batches)
        updates = self.local_replay.train(self.timesteps + env_steps, env_steps, self.learner.update)
        if updates:
            self.sync_weights()
        learner = {**self.learner.take_stats(), "epsilon": epsilon, "updatesThisIteration": updates}
        return StepResult(env_steps, learner=LearnerStats(learner), replay=self.local_replay.stats())

    # -- the Algorithm contract -------------------------------------------------------------------
    def worker_weights(self) -> dict[str, np.ndarray]:
        return self.learner.weights()

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            q = self.learner.online(obs_tensor(obs, self.device)).cpu().numpy()
        actions = q.argmax(axis=1)
        if explore:
            random = self.np_random.random(len(actions)) < self.epsilon()
            actions = np.where(random, self.np_random.integers(0, q.shape[1], len(actions)), actions)
        return actions

    def evaluation_settings(self) -> PolicySettings:
        return PolicySettings(epsilon=self.epsilon())

    def policy_module(self) -> nn.Module:
        return GreedyQ(copy.deepcopy(self.learner.online).cpu().eval())

    def learner_state(self) -> dict[str, bytes]:
        files = self.learner.state_files()
        schedule = {**self.local_replay.schedule(), "epsilon": self.epsilon()}
        files[SCHEDULE_FILE] = json.dumps(schedule).encode()
        return files

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.learner.load_state_files(files)
        if SCHEDULE_FILE in files:
            self.local_replay.restore_schedule(json.loads(files[SCHEDULE_FILE]))

