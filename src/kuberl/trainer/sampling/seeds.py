"""The env and policy seeds a run derives from `spec.config.seed`, laid out so that no two envs share one.

An env seed is an integer that Gymnasium (and ALE) turn into the env's generator: two envs reset from the same
integer play the same episodes. A vector env seeds its env j from its base + j, so each worker's envs take a run
of consecutive integers:

- worker i (0: sampling in the learner's process; 1 to `rollouts.workers`: the rollout worker actors) resets its
  envs from seed + stride * i + j, where the stride is 1,000, or `rollouts.envsPerWorker` where that is more;
- evaluation episode k (in the learner's process or on evaluation actors) plays from seed + EVALUATION_OFFSET + k,
  past the last env of the most workers with the most envs the API allows.

Policies' seeds (exploration noise, minibatch order) are not env seeds: each comes from a `SeedSequence` child
of the run's seed, whose stream no integer seed replays.
"""

from __future__ import annotations

import numpy as np

MAX_WORKERS = 1024  # rollouts.workers' bound (api.types.RolloutsSpec)
MAX_ENVS_PER_WORKER = 4096  # rollouts.envsPerWorker's bound
ENV_SEED_STRIDE = 1000  # between workers' first envs, where they have no more envs than this
EVALUATION_OFFSET = MAX_ENVS_PER_WORKER * (MAX_WORKERS + 1)  # 4,198,400: past worker 1,024's 4,096th env
EVALUATION_STREAM = MAX_WORKERS + 1  # evaluation actors' policies: SeedSequence children apart from workers'


def env_seed_stride(envs_per_worker: int) -> int:
    """How far apart two workers' first env seeds are: far enough that one's envs never reach the next's."""
    return max(ENV_SEED_STRIDE, envs_per_worker)


def worker_seeds(seed: int | None, worker_index: int, envs_per_worker: int) -> tuple[int | None, int]:
    """(the first env's reset seed, the policy's seed) of the worker at `worker_index`.

    With a seed both follow from it, so a run repeats, and differ between workers. The policy's comes from a
    `SeedSequence` child rather than the envs' integer, whose stream it would otherwise replay (numpy's and
    Gymnasium's generators are both PCG64 seeded through a SeedSequence). Without a seed the envs reset from
    fresh entropy and so does the policy: unseeded workers never share their exploration noise.
    """
    if seed is None:
        return None, int(np.random.SeedSequence().generate_state(1)[0])
    policy_seed = np.random.SeedSequence(seed, spawn_key=(worker_index,)).generate_state(1)[0]
    return seed + env_seed_stride(envs_per_worker) * worker_index, int(policy_seed)


def evaluation_seeds(seed: int | None, episodes: int) -> list[int]:
    """The env seeds of an evaluation's episodes (unseeded runs evaluate on seed 0's, so evaluations compare)."""
    first = (seed or 0) + EVALUATION_OFFSET
    return list(range(first, first + episodes))


def evaluation_policy_seed(seed: int | None, actor: int) -> int:
    """The policy seed of evaluation actor `actor` (its exploration noise, with `evaluation.explore`)."""
    return int(np.random.SeedSequence(seed or 0, spawn_key=(EVALUATION_STREAM, actor)).generate_state(1)[0])


__all__ = ["ENV_SEED_STRIDE", "EVALUATION_OFFSET", "env_seed_stride", "evaluation_policy_seed", "evaluation_seeds",
           "worker_seeds"]
