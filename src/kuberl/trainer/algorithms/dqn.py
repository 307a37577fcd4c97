"""DQN (algorithm "dqn"): one learner, one replay buffer, rollout workers in-process or on Ray.

Each iteration: set the workers' epsilon from the schedule, sample one fragment from every
worker, turn it into n-step transitions, add them to replay (new transitions get the largest
priority seen), then run `replay_ratio` learner updates per env step once `learning_starts`
env steps are in: double DQN with a target network, importance-weighted Huber loss, new
priorities back to the buffer. The Q-learning pieces live in `kuberl.trainer.models.q_network`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from kuberl.api.hyperparams import DQNParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.models.q_network import (
    TRANSITION_KEYS,
    QLearner,
    QPolicyFactory,
    build_q_network,
    transitions_from_batch,
)
from kuberl.trainer.replay.buffers import make_replay_buffer
from kuberl.trainer.replay.nstep import linear_schedule
from kuberl.trainer.sampling.rollout_worker import WorkerSet

SCHEDULE_FILE = "dqn_schedule.json"


class DQNConfig(AlgorithmConfig):
    algorithm = "dqn"

    def algorithm_class(self) -> type[DQN]:
        return DQN


class DQN(Algorithm):
    params: DQNParams

    def setup(self) -> None:
        params = self.params
        # Small MLP updates gain nothing from intra-op threads, and on a busy machine they lose a lot
        # (measured: 8,000 steps took 16 s with one thread, 295 s with two on a loaded 2-core box).
        torch.set_num_threads(1)
        self.learner = QLearner(build_q_network(self.observation_space, self.action_space, params), params, self.device)
        self.replay = make_replay_buffer(
            self.spec.replay.capacity, prioritized=self.spec.replay.prioritized, alpha=params.priority_alpha,
            beta=params.priority_beta, eps=params.priority_eps, seed=params.seed,
        )
        self.update_credit = 0.0  # fractional learner updates owed by the replay ratio
        self.workers = WorkerSet(self.worker_config(), QPolicyFactory.from_params(params), self.spec.rollouts.workers)
        self.sync_weights()

    # -- schedules --------------------------------------------------------------------------------
    def epsilon(self, timesteps: int | None = None) -> float:
        p = self.params
        return linear_schedule(self.timesteps if timesteps is None else timesteps, p.epsilon_start, p.epsilon_end,
                               p.epsilon_timesteps)

    def beta(self, timesteps: int) -> float:
        p = self.params
        return linear_schedule(timesteps, p.priority_beta, 1.0, p.priority_beta_timesteps)

    # -- one iteration ----------------------------------------------------------------------------
    def training_step(self) -> dict[str, Any]:
        assert self.workers is not None
        p = self.params
        epsilon = self.epsilon()
        self.workers.configure_policies(epsilon=epsilon)
        batches = self.collect()
        env_steps = sum(b.env_steps for b in batches)
        for batch in batches:
            transitions = transitions_from_batch(batch, gamma=p.gamma, n_step=p.n_step)
            self.replay.add({k: transitions[k] for k in TRANSITION_KEYS})
        seen = self.timesteps + env_steps
        updates = 0
        if seen >= p.learning_starts:
            self.update_credit += env_steps * p.replay_ratio
            updates = int(self.update_credit)
            self.update_credit -= updates
            beta = self.beta(seen)
            for _ in range(updates):
                sample = self.replay.sample(p.train_batch_size, beta=beta)
                self.replay.update_priorities(sample["ids"], self.learner.update(sample))
        if updates:
            self.sync_weights()
        learner = self.learner.take_stats()
        learner.update(epsilon=epsilon, updatesThisIteration=updates)
        return {"envSteps": env_steps, "learner": learner, "replay": {"shard_0": self.replay.stats()}}

    # -- the Algorithm contract -------------------------------------------------------------------
    def worker_weights(self) -> dict[str, np.ndarray]:
        return self.learner.weights()

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            q = self.learner.online(torch.as_tensor(obs, dtype=torch.float32, device=self.device)).cpu().numpy()
        actions = q.argmax(axis=1)
        if explore:
            random = self.np_random.random(len(actions)) < self.epsilon()
            actions = np.where(random, self.np_random.integers(0, q.shape[1], len(actions)), actions)
        return actions

    def learner_state(self) -> dict[str, bytes]:
        files = self.learner.state_files()
        files[SCHEDULE_FILE] = json.dumps({"updateCredit": self.update_credit, "epsilon": self.epsilon()}).encode()
        return files

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.learner.load_state_files(files)
        if SCHEDULE_FILE in files:
            self.update_credit = float(json.loads(files[SCHEDULE_FILE])["updateCredit"])

