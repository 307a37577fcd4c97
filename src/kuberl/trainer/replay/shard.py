"""A replay shard: one slice of Ape-X's replay memory, as a Ray actor that asks for no CPU.

Rollout workers `add` their n-step transitions in the compact form (`frames.FrameTransitions`,
with the priorities they computed) straight to a shard; the learner `sample`s from every shard and sends `update_priorities` back. Shards keep
no references to anyone, so a lost shard costs only its samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kuberl.trainer.distributed.placement import current_placement, placement_fields
from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS
from kuberl.trainer.iteration_result import Scalar
from kuberl.trainer.replay.buffers import Batch, make_replay_buffer
from kuberl.trainer.replay.frames import FrameTransitions


class ReplayShard:
    """A prioritized (or uniform) replay buffer behind an actor-friendly API."""

    def __init__(self, index: int, capacity: int, *, prioritized: bool = True, seed: int | None = None,
                 **buffer_options: Any):
        """`buffer_options`: the rest of `make_replay_buffer`'s (alpha, beta, eps, frames_per_transition)."""
        self.index = index
        shard_seed = None if seed is None else seed + 7919 * (index + 1)
        self.buffer = make_replay_buffer(capacity, prioritized=prioritized, seed=shard_seed, **buffer_options)
        self.placement = placement_fields(current_placement())  # its Ray node (none without Ray)

    def add(self, batch: Batch | FrameTransitions, priorities: np.ndarray | None = None) -> int:
        """Store transitions; returns the transitions ever added to this shard."""
        self.buffer.add(batch, priorities)
        return self.buffer.storage.adds

    def sample(self, batch_size: int, beta: float, min_size: int = 1) -> tuple[Batch | None, int]:
        """(a prioritized sample, or None while the shard holds fewer than `min_size`; adds so far)."""
        if len(self.buffer) < max(1, min_size):
            return None, self.buffer.storage.adds
        return self.buffer.sample(batch_size, beta=beta), self.buffer.storage.adds

    def update_priorities(self, ids: np.ndarray, td_errors: np.ndarray) -> int:
        return self.buffer.update_priorities(ids, td_errors)

    def stats(self) -> dict[str, Scalar]:
        """The buffer's statistics, the bytes it has allocated (`bytes`; per transition slot) and where it runs
        (`node`, `nodeIp`, `host`: `distributed.placement`)."""
        nbytes = self.buffer.nbytes
        return {**self.buffer.stats(), "bytes": nbytes, "bytesPerTransition": nbytes / self.buffer.capacity,
                **self.placement}


def start_replay_shard(index: int, capacity: int, *, memory_bytes: int | None = None, **buffer_options: Any) -> Any:
    """A ReplayShard actor; num_cpus=0 so shards fit on any node, beside busier actors.

    `memory_bytes` (what the shard will allocate, `replay.memory.replay_bytes`) is asked of Ray as
    the `memory` resource, so Ray places a shard only on a node with that much room for it.
    """
    import ray

    options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "name": None, **ACTOR_OPTIONS}
    if memory_bytes:
        options["memory"] = memory_bytes
    actor = ray.remote(ReplayShard).options(**options)
    return actor.remote(index, capacity, **buffer_options)
