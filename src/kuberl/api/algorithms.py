"""The algorithm registry: the one table every part reads to know which algorithms exist.

Each row names an algorithm (`spec.algorithm`), its hyperparameter model (what `spec.config` may
hold), the trainer's config class as an import path (loaded lazily, so that the operator, which
imports `kuberl.api`, never imports torch), the Gymnasium space classes it can act in and observe,
and the replay it uses. The CRD's enum, validation, the reference docs, `kuberl train`'s env checks
and `AlgorithmConfig.from_experiment` all read it.

Adding an algorithm: one module under `kuberl/trainer/algorithms/` (its config, loss and update
step), its hyperparameter model in `kuberl.api.hyperparams`, and one row here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kuberl.api.base import manifest_names
from kuberl.api.hyperparams import (
    ApexDQNParams,
    APPOParams,
    CommonParams,
    DQNParams,
    IMPALAParams,
    PPOParams,
    SACParams,
)

# Where an algorithm keeps its replay. none: on-policy; local: one buffer in the learner's process; shards: replay
# shard actors that rollout workers add to and the learner samples from; local-or-shards: local, unless the manifest
# asks for shards (`AlgorithmEntry.placement`).
Replay = Literal["none", "local", "shards", "local-or-shards"]
Placement = Literal["none", "local", "shards"]


DEFAULT_SHARDS = 1  # an algorithm that always keeps its replay in shards, with `replay.shards` unset


@dataclass(frozen=True)
class AlgorithmEntry:
    name: str
    hyperparams: type[CommonParams]
    config_class: str  # "module:Class" of the trainer's AlgorithmConfig subclass
    action_spaces: tuple[str, ...]  # gymnasium.spaces class names
    observation_spaces: tuple[str, ...]
    replay: Replay

    @property
    def off_policy(self) -> bool:
        return self.replay != "none"

    def placement(self, workers: int, shards: int | None) -> Placement:
        """Where this run's replay lives, from `spec.rollouts.workers` and `spec.replay.shards` (None: unset).

        local-or-shards takes the shards when the manifest sets `replay.shards` >= 1 and has rollout workers to
        feed them (workers >= 1); otherwise the learner keeps one buffer, as with `shards` unset.
        """
        if self.replay == "local-or-shards":
            return "shards" if shards is not None and shards >= 1 and workers >= 1 else "local"
        return self.replay

    def shard_count(self, workers: int, shards: int | None) -> int:
        """Replay buffers this run allocates: `shards` (1 when unset) on the shard path, else 1 (or 0: on-policy)."""
        placement = self.placement(workers, shards)
        if placement == "shards":
            return DEFAULT_SHARDS if shards is None else shards
        return 0 if placement == "none" else 1


REGISTRY: dict[str, AlgorithmEntry] = {
    entry.name: entry
    for entry in (
        AlgorithmEntry("ppo", PPOParams, "kuberl.trainer.algorithms.ppo:PPOConfig",
                       action_spaces=("Discrete", "Box"), observation_spaces=("Box",), replay="none"),
        AlgorithmEntry("dqn", DQNParams, "kuberl.trainer.algorithms.dqn:DQNConfig",
                       action_spaces=("Discrete",), observation_spaces=("Box",), replay="local"),
        AlgorithmEntry("apex-dqn", ApexDQNParams, "kuberl.trainer.algorithms.apex:ApexDQNConfig",
                       action_spaces=("Discrete",), observation_spaces=("Box",), replay="shards"),
        AlgorithmEntry("impala", IMPALAParams, "kuberl.trainer.algorithms.impala:IMPALAConfig",
                       action_spaces=("Discrete", "Box"), observation_spaces=("Box",), replay="none"),
        AlgorithmEntry("appo", APPOParams, "kuberl.trainer.algorithms.appo:APPOConfig",
                       action_spaces=("Discrete", "Box"), observation_spaces=("Box",), replay="none"),
        AlgorithmEntry("sac", SACParams, "kuberl.trainer.algorithms.sac:SACConfig",
                       action_spaces=("Box",), observation_spaces=("Box",), replay="local-or-shards"),
    )
}

ALGORITHM_NAMES: tuple[str, ...] = tuple(REGISTRY)
HYPERPARAMS: dict[str, type[CommonParams]] = {name: entry.hyperparams for name, entry in REGISTRY.items()}


def hyperparameter_names(algorithm: str) -> list[str]:
    """`spec.config`'s keys for `algorithm`, by their manifest (camelCase) names."""
    return manifest_names(REGISTRY[algorithm].hyperparams)


def unknown_hyperparameter(key: str, algorithm: str, shown: str | None = None) -> str | None:
    """Why `key`, not a hyperparameter of `algorithm`, is refused, where it is one of another algorithm's (or
    one `algorithm` replaces): "'clipParam' is not a hyperparameter of dqn (it is one of ppo and appo's)";
    else None. `shown`: the name the message quotes (a sweep's parameter path), default `key`."""
    instead = REGISTRY[algorithm].hyperparams.not_read.get(key)
    if instead is not None:
        return f"{shown or key!r} is not a hyperparameter of {algorithm}: {instead}"
    owners = [name for name in REGISTRY if name != algorithm and key in hyperparameter_names(name)]
    if not owners:
        return None
    return f"{shown or key!r} is not a hyperparameter of {algorithm} (it is one of {listed(owners)}'s)"


def listed(names: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
