"""An evaluation actor: the rollout workers' policy, loaded with the learner's weights and
observation-filter state, playing whole episodes in its own env (a Ray actor)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from kuberl.trainer.evaluation.episodes import EnvFactory, PlayedEpisodes, play_episodes
from kuberl.trainer.learning.device import configure_cpu_threads
from kuberl.trainer.sampling.filters import RunningStats, make_filter
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.rollout_worker import PolicyFactory


class EvaluationActor(Protocol):
    """What the evaluator starts as each Ray actor: an `EvaluationWorker`, or a multi-agent run's own
    (`Algorithm.evaluation_worker_class`)."""

    def __init__(self, make: Any, policies: Any, observation_filter: str, seed: int) -> None: ...

    def evaluate(self, weights: Any, filter_state: Any, seeds: list[int], *, explore: bool,
                 record_first: bool, settings: PolicySettings | None = None) -> PlayedEpisodes: ...


class EvaluationWorker:
    def __init__(self, make: EnvFactory, policy_factory: PolicyFactory, observation_filter: str, seed: int):
        configure_cpu_threads()
        self.make = make
        env = make()
        try:
            observation_space, action_space = env.observation_space, env.action_space
        finally:
            env.close()
        self.policy = policy_factory(observation_space, action_space, seed)
        self.filter = make_filter(observation_filter, tuple(observation_space.shape or ()))

    def evaluate(self, weights: Any, filter_state: RunningStats | None, seeds: list[int], *, explore: bool,
                 record_first: bool, settings: PolicySettings | None = None) -> PlayedEpisodes:
        """Load the policy (configured with `settings`, the algorithm's `evaluation_settings()`), play one
        episode per seed; returns, lengths and the video bytes (or None)."""
        self.policy.set_weights(weights)
        if settings:
            self.policy.configure(**settings.kwargs())  # type: ignore[attr-defined]
        self.filter.set_state(filter_state)

        def act(obs: Any) -> Any:
            filtered = self.filter(np.asarray(obs, dtype=np.float32)[None], update=False)
            actions, _extras = self.policy.compute_actions(filtered, explore=explore)
            action = actions[0]
            return action.item() if np.ndim(action) == 0 else action

        return play_episodes(self.make, act, seeds, record_first=record_first)
