"""What an algorithm asks of its rollout workers, however they run.

Three samplers implement it:
- `WorkerSet` (PPO, DQN, SAC): N workers sampled together once per iteration (`sample()`), in the learner's
  process when N is 0, else Ray actors;
- `FragmentQueue` (IMPALA, APPO): Ray actors that sample without waiting into a bounded queue (`poll()`,
  `take()`);
- `ShardWorkerPool` (Ape-X, SAC on replay shards): Ray actors that add their transitions to replay shards
  themselves and report what they did (`dispatch()`, `reports()`).

They differ in how experience reaches the learner, so that part is each one's own; what every algorithm does
with any of them is here: publish weights, send the observation filter, count replaced workers, give
evaluation the policy the workers run, stop.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from kuberl.trainer.sampling.filters import RunningStats
from kuberl.trainer.sampling.rollout_worker import WorkerPolicies


@runtime_checkable
class Sampler(Protocol):
    @property
    def policy_factory(self) -> WorkerPolicies:
        """The sampling policy the workers run (evaluation actors run it too)."""
        ...

    @property
    def restarts(self) -> int:
        """Workers that died and were replaced so far."""
        ...

    def publish_weights(self, weights: Any, version: int) -> None:
        """Make the learner's weights (policy version `version`) the ones the workers sample with next."""
        ...

    def sync_filter(self, state: RunningStats | None) -> None:
        """The master observation filter, for the workers to normalise with."""
        ...

    def stop(self) -> None: ...


__all__ = ["Sampler"]
