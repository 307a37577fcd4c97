"""The two kinds the cluster commands act on, and how a user names them: kubectl's resource names
(`rlexperiment`, `rlx`, `rlsweeps.kuberl.io`, ...) or a plain `experiment`/`sweep`, alone (`kuberl list
sweeps`) or before a name (`kuberl status sweep/cartpole-lr`, as `kubectl get rls/cartpole-lr`)."""

from __future__ import annotations

from dataclasses import dataclass

from kuberl.api.sweep_types import KIND as SWEEP_KIND
from kuberl.api.sweep_types import PLURAL as SWEEP_PLURAL
from kuberl.api.sweep_types import SHORT_NAMES as SWEEP_SHORT_NAMES
from kuberl.api.sweep_types import SINGULAR as SWEEP_SINGULAR
from kuberl.api.types import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR


@dataclass(frozen=True)
class Kind:
    kind: str  # RLExperiment
    plural: str  # rlexperiments
    singular: str  # rlexperiment
    word: str  # experiment: what a user calls it
    short_names: tuple[str, ...]

    @property
    def qualified(self) -> str:
        """`rlexperiment.kuberl.io`: how kubectl names an object of this kind among several kinds."""
        return f"{self.singular}.{GROUP}"

    def what(self, name: str) -> str:
        """`rlexperiment 'cartpole'`, as errors name an object."""
        return f"{self.singular} {name!r}"

    def aliases(self) -> set[str]:
        names = {self.singular, self.plural, self.word, f"{self.word}s", *self.short_names}
        return names | {f"{n}.{GROUP}" for n in (self.singular, self.plural)}


EXPERIMENT = Kind(KIND, PLURAL, SINGULAR, "experiment", tuple(SHORT_NAMES))
SWEEP = Kind(SWEEP_KIND, SWEEP_PLURAL, SWEEP_SINGULAR, "sweep", tuple(SWEEP_SHORT_NAMES))
KINDS = (EXPERIMENT, SWEEP)


def kind_named(word: str) -> Kind | None:
    """The kind a user's word names (case-insensitive), or None."""
    lowered = word.lower()
    return next((k for k in KINDS if lowered in k.aliases()), None)


def parse_reference(target: str) -> tuple[Kind | None, str]:
    """`sweep/NAME` -> (SWEEP, NAME); a bare NAME, or anything whose part before '/' names no kind, ->
    (None, target)."""
    head, slash, name = target.partition("/")
    kind = kind_named(head) if slash and name and "/" not in name else None
    return (kind, name) if kind is not None else (None, target)


def kind_words() -> str:
    """What `kuberl list KIND` accepts, for its help and its error (kubectl's names are accepted too)."""
    return " or ".join(f"{k.word}s ({'/'.join(k.short_names)})" for k in KINDS)
