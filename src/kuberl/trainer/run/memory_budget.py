"""The replay memory budget, checked before training: a replay that cannot fit is a user's mistake
(exit 2 naming `spec.replay.capacity`), not a pod OOM-killed in a loop.

Where replay lives (the registry's `placement`): DQN's buffer, and SAC's without shards, in the trainer's
process (the head pod in a cluster); replay shards (Ape-X, SAC with `replay.shards`) are Ray actors
that ask Ray for their bytes as the `memory` resource, so Ray puts each on a node (pod) with room for it. Locally everything shares this machine's available memory.
Replay may take `REPLAY_SHARE` of a pod's memory or of the machine's available memory: Ray's
object store takes 30% of a node's memory by default, and the processes need the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kuberl.api.algorithms import REGISTRY
from kuberl.api.field_errors import FieldError
from kuberl.api.types import RLExperiment
from kuberl.api.validation import hyperparams_for
from kuberl.trainer.replay.buffers import split_capacity
from kuberl.trainer.replay.memory import FrameLayout, action_bytes, bytes_per_transition, replay_bytes
from kuberl.trainer.sampling.envs import EnvSpaces

REPLAY_SHARE = 0.6
_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


@dataclass(frozen=True)
class MemoryPlace:
    """Somewhere replay can live: a pod (named by its spec field) or this machine, and its memory."""

    name: str
    bytes: int


def quantity_bytes(quantity: str | int) -> int:
    """A Kubernetes memory quantity ("4Gi", "512M", 1073741824) in bytes."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)", str(quantity).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    return int(float(match.group(1)) * _SUFFIXES[match.group(2)])


def pack(shard_bytes: list[int], places: list[MemoryPlace], share: float = REPLAY_SHARE) -> list[int] | None:
    """First fit, largest shard first: the place of each shard, or None when they do not all fit."""
    room = [place.bytes * share for place in places]
    where = [0] * len(shard_bytes)
    for shard in sorted(range(len(shard_bytes)), key=lambda i: -shard_bytes[i]):
        for index, free in enumerate(room):
            if shard_bytes[shard] <= free:
                room[index] -= shard_bytes[shard]
                where[shard] = index
                break
        else:
            return None
    return where


def available_memory() -> int | None:
    """This machine's available memory (MemAvailable), capped by a cgroup v2 limit; None if unknown."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as fh:
            limit = fh.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as fh:
            used = int(fh.read().strip())
        if limit != "max" and available is not None:
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def replay_places(experiment: RLExperiment, *, in_cluster: bool, available: int | None) -> list[MemoryPlace]:
    """Where the experiment's replay can live: pods from the manifest, or this machine."""
    spec = experiment.spec
    if not in_cluster:
        return [] if available is None else [MemoryPlace("this machine's available memory", available)]
    head = MemoryPlace("spec.head.memory", quantity_bytes(spec.head.memory))
    if REGISTRY[spec.algorithm].placement(spec.rollouts.workers, spec.replay.shards) == "local":
        return [head]  # one buffer in the trainer's process, on the head
    workers = [MemoryPlace("spec.workers.memory", quantity_bytes(spec.workers.memory))] * spec.workers.replicas
    return [head, *workers]


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def replay_memory_errors(experiment: RLExperiment, spaces: EnvSpaces, *, in_cluster: bool,
                         available: int | None = None) -> list[FieldError]:
    """[] when the replay fits where it will live, else one error on spec.replay.capacity with the numbers."""
    spec = experiment.spec
    entry = REGISTRY[spec.algorithm]
    if not entry.off_policy:
        return []
    places = replay_places(experiment, in_cluster=in_cluster,
                           available=available if available is not None else available_memory())
    if not places:
        return []  # nothing to compare with (no /proc/meminfo)
    layout = FrameLayout.of(spaces.observation_space, spaces.frame_stack, hyperparams_for(experiment).observation_filter)
    fragment, prioritized = spec.rollouts.fragment_length, spec.replay.prioritized
    shards = entry.shard_count(spec.rollouts.workers, spec.replay.shards)
    action_size = action_bytes(spaces.action_space)

    def shard_bytes(capacity: int) -> list[int]:
        return replay_bytes(layout, fragment, split_capacity(capacity, shards), prioritized=prioritized,
                            action_size=action_size)

    needed = shard_bytes(spec.replay.capacity)
    if pack(needed, places) is not None:
        return []
    low, high = 0, spec.replay.capacity  # the largest capacity that fits
    while low < high:
        mid = (low + high + 1) // 2
        if mid >= shards and pack(shard_bytes(mid), places) is not None:
            low = mid
        else:
            high = mid - 1
    per_transition = bytes_per_transition(layout, fragment, spec.replay.capacity, prioritized=prioritized,
                                          action_size=action_size)
    frames = f"{layout.stack_depth} x " if layout.stack_depth > 1 else ""
    observation = f"{frames}{'x'.join(map(str, layout.frame_shape)) or 'scalar'} {layout.dtype} observations"
    shard_text = f" in {shards} shards of {_gib(max(needed))}" if shards > 1 else ""
    if in_cluster:
        counts: dict[str, int] = {}
        for place in places:
            counts[f"{place.name} {_gib(place.bytes)}"] = counts.get(f"{place.name} {_gib(place.bytes)}", 0) + 1
        pods = ", ".join(name + (f" x {n}" if n > 1 else "") for name, n in counts.items())
        where, fix = f"each pod's memory ({pods})", " or give the pods more memory"
    else:
        where, fix = f"this machine's available memory ({_gib(places[0].bytes)})", ""
    message = (
        f"{spec.replay.capacity:,} transitions of {per_transition:,.0f} bytes each ({observation}) need "
        f"{_gib(sum(needed))} of memory{shard_text}, but replay may use at most {REPLAY_SHARE:.0%} of {where}; "
        f"lower spec.replay.capacity to at most {low:,}{fix}"
    )
    return [FieldError("spec.replay.capacity", message)]


def replay_memory_errors_for(experiment: RLExperiment, *, in_cluster: bool) -> list[FieldError]:
    """`replay_memory_errors` with the env's spaces (it builds the env once) and this machine's memory."""
    if REGISTRY[experiment.spec.algorithm].replay == "none":
        return []
    from kuberl.trainer.sampling.envs import EnvSettings, env_spaces

    return replay_memory_errors(experiment, env_spaces(EnvSettings.from_spec(experiment.spec.env)),
                                in_cluster=in_cluster)
