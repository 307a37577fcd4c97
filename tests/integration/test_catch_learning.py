"""DQN, Ape-X and IMPALA learn PixelCatch-v0, the pixel game whose reward comes when the ball lands, 11 steps after
it starts (random play scores about -0.6, a perfect one 1). Each is judged at the end of a fixed env-step budget,
on its last 100 training episodes and on a greedy evaluation: a run that learned and fell away fails."""

from __future__ import annotations

import pytest

from kuberl.trainer.algorithms.apex import ApexDQNConfig
from kuberl.trainer.algorithms.dqn import DQNConfig
from kuberl.trainer.algorithms.impala import IMPALAConfig
from kuberl_testing.catch_env import MODEL

pytestmark = pytest.mark.slow

CATCH = "kuberl_testing.catch_env:PixelCatch-v0"
# Env steps, with each algorithm's defaults (seed 1, on 2 loaded cores): DQN's 100-episode mean passed 0.8 at 18k
# and ended at 0.96 (31 s of training); IMPALA's passed 0.9 at 130k and ended at 0.96 (25 s); Ape-X's (2 workers,
# one shard) passed 0.9 at 20k and ended at 1.0 (38 s, and Ray's start). Each greedy policy caught all 50 balls.
BUDGET = {"dqn": 40_000, "impala": 150_000, "apex-dqn": 40_000}


def _config(algorithm: str):
    if algorithm == "dqn":
        return DQNConfig().environment(CATCH).rollouts(workers=0, envs_per_worker=8, fragment_length=32)
    if algorithm == "impala":
        return IMPALAConfig().environment(CATCH).rollouts(workers=0, envs_per_worker=16, fragment_length=32)
    return (ApexDQNConfig().environment(CATCH).rollouts(workers=2, envs_per_worker=8, fragment_length=32)
            .replay(shards=1, capacity=20_000).training(min_iteration_seconds=0.5))


@pytest.mark.parametrize("algorithm", list(BUDGET))
def test_learns_catch_within_its_env_step_budget(algorithm: str) -> None:
    algo = _config(algorithm).training(model=MODEL).debugging(seed=1).build()
    try:
        while algo.timesteps < BUDGET[algorithm]:
            result = algo.train()
        greedy = algo.evaluate(episodes=50)["episodeReturnMean"]
    finally:
        algo.stop()
    print(f"{algorithm}: a 100-episode mean of {result['episodeReturnMean']}, greedy {greedy}, "
          f"after {result['timesteps']} env steps", flush=True)
    assert result["episodes"] >= 100 and result["episodeReturnMean"] >= 0.6, result["episodeReturnMean"]
    assert greedy >= 0.8, greedy
