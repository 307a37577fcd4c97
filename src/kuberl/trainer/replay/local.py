"""Replay in the learner's process (the registry's replay "local": DQN, SAC): one buffer that rollout
fragments go into as compact n-step transitions, and the learner updates the replay ratio owes.

Each iteration: `add(batches)`, then `train(seen, env_steps, update)` runs `replay_ratio` updates per env
step once `learning_starts` env steps are in (fractions carry over in `update_credit`, which checkpoints
keep), each on a sample of `train_batch_size` whose new priorities (|TD errors|) go back to the buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from kuberl.trainer.iteration_result import ReplayStats
from kuberl.trainer.learning.schedules import priority_beta
from kuberl.trainer.replay.buffers import Batch, make_replay_buffer
from kuberl.trainer.replay.memory import FrameLayout, frames_per_transition
from kuberl.trainer.replay.nstep import compact_transitions

if TYPE_CHECKING:
    from kuberl.api.hyperparams import DQNParams, SACParams
    from kuberl.api.types import RLExperimentSpec
    from kuberl.trainer.sampling.rollout_worker import SampleBatch


class LocalReplay:
    def __init__(self, spec: RLExperimentSpec, params: DQNParams | SACParams, observation_space: gym.Space,
                 frame_stack: int):
        self.params = params
        self.layout = FrameLayout.of(observation_space, frame_stack, params.observation_filter)
        self.buffer = make_replay_buffer(
            spec.replay.capacity, prioritized=spec.replay.prioritized, alpha=params.priority_alpha,
            beta=params.priority_beta, eps=params.priority_eps, seed=params.seed,
            frames_per_transition=frames_per_transition(self.layout, spec.rollouts.fragment_length),
        )
        self.added_bytes = 0  # compact transitions added, and their count: bytes per transition sent
        self.added = 0
        self.update_credit = 0.0  # fractional learner updates owed by the replay ratio

    def beta(self, timesteps: int) -> float:
        p = self.params
        return priority_beta(timesteps, p.priority_beta, p.priority_beta_timesteps, p.priority_beta_final)

    def add(self, batches: Sequence[SampleBatch]) -> None:
        p = self.params
        for batch in batches:
            transitions, _ = compact_transitions(batch, gamma=p.gamma, n_step=p.n_step,
                                                 stack_depth=self.layout.stack_depth)
            self.buffer.add(transitions)
            self.added_bytes += transitions.nbytes
            self.added += len(transitions)

    def train(self, seen: int, env_steps: int, update: Callable[[Batch], np.ndarray]) -> int:
        """Run the updates owed after `env_steps` more (`seen` in all); returns how many ran."""
        p = self.params
        if seen < p.learning_starts:
            return 0
        self.update_credit += env_steps * p.replay_ratio
        updates = int(self.update_credit)
        self.update_credit -= updates
        beta = self.beta(seen)
        for _ in range(updates):
            sample = self.buffer.sample(p.train_batch_size, beta=beta)
            self.buffer.update_priorities(sample["ids"], update(sample))
        return updates

    def schedule(self) -> dict[str, float]:
        """What a checkpoint keeps of the replay ratio's bookkeeping."""
        return {"updateCredit": self.update_credit}

    def restore_schedule(self, schedule: dict[str, Any]) -> None:
        self.update_credit = float(schedule["updateCredit"])

    def stats(self) -> ReplayStats:
        return ReplayStats({"shard_0": self.buffer.stats()}, bytes_per_transition=self.buffer.nbytes / self.buffer.capacity,
                           wire_bytes_per_transition=self.added_bytes / self.added if self.added else None)
