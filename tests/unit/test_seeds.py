"""Seeds: no two envs of a run (training workers' envs, evaluation episodes) reset from the same integer."""

from __future__ import annotations

import pytest

from kuberl.trainer.run.run_record import seeds as seed_table
from kuberl.trainer.sampling import seeds


def env_ranges(table: dict) -> list[tuple[str, range]]:
    """Every env seed a run's record lists, as (owner, range of seeds)."""
    ranges = [(f"worker {w['index']}", range(w["envSeed"], w["envSeed"] + w["envs"])) for w in table["workers"]]
    first, last = table["evaluationEpisodes"]
    return [*ranges, ("evaluation", range(first, last + 1))]


def overlaps(ranges: list[tuple[str, range]]) -> list[tuple[str, str]]:
    ordered = sorted(ranges, key=lambda item: item[1].start)
    return [(a, b) for (a, ra), (b, rb) in zip(ordered, ordered[1:], strict=False) if rb.start < ra.stop]


@pytest.mark.parametrize(("workers", "envs", "episodes"), [
    (0, 8, 10), (10, 8, 10),  # worker 10's envs were evaluation's
    (12, 8, 100), (2, 1500, 10),  # more than 1,000 envs a worker
    (seeds.MAX_WORKERS, seeds.MAX_ENVS_PER_WORKER, 100_000),  # the API's bounds
])
@pytest.mark.parametrize("seed", [0, 3, 123_456])
def test_no_two_envs_of_a_run_share_a_seed(seed: int, workers: int, envs: int, episodes: int) -> None:
    table = seed_table(seed, workers=workers, envs_per_worker=envs, shards=0, evaluation_episodes=episodes)
    assert len(table["workers"]) == max(1, workers)
    assert overlaps(env_ranges(table)) == []


def test_the_bounds_are_the_apis() -> None:
    from kuberl.api.types import EvaluationSpec, RolloutsSpec

    def upper(model: type, name: str) -> int:
        return next(m.le for m in model.model_fields[name].metadata if hasattr(m, "le"))

    assert upper(RolloutsSpec, "workers") == seeds.MAX_WORKERS
    assert upper(RolloutsSpec, "envs_per_worker") == seeds.MAX_ENVS_PER_WORKER
    assert upper(EvaluationSpec, "episodes") == 100_000


def test_training_seeds_of_up_to_1000_envs_a_worker_are_as_before() -> None:
    """What a run trains on does not move: worker i's envs still reset from seed + 1000 i."""
    assert [seeds.worker_seeds(7, i, 8)[0] for i in range(3)] == [7, 1007, 2007]


def test_policy_seeds_differ_between_workers_and_evaluation_actors() -> None:
    workers = {seeds.worker_seeds(5, i, 8)[1] for i in range(seeds.MAX_WORKERS + 1)}
    actors = {seeds.evaluation_policy_seed(5, i) for i in range(64)}
    assert len(workers) == seeds.MAX_WORKERS + 1 and len(actors) == 64 and not workers & actors


def test_a_run_evaluates_on_the_seeds_its_record_lists() -> None:
    from kuberl.trainer.algorithms.ppo import PPOConfig

    algo = PPOConfig().environment("CartPole-v1").rollouts(workers=0, envs_per_worker=2).debugging(seed=11).build()
    try:
        listed = seed_table(11, workers=0, envs_per_worker=2, shards=0, evaluation_episodes=5)
        played = algo.evaluation_seeds(5)
        assert [played[0], played[-1]] == listed["evaluationEpisodes"] and len(set(played)) == 5
        assert algo.evaluation_seeds(3, seed=40) == [40, 41, 42]  # Algorithm.evaluate(seed=...) plays from it
    finally:
        algo.stop()
