"""spec.checkpoint.restoreFrom: start a run from another run's checkpoint, with this manifest's hyperparameters.

Used when the run has no checkpoint of its own (a run that has one resumes from it, so a restarted
head never goes back to the other run). PBT's exploit step is this: a lagging trial continues from a
leading trial's checkpoint with perturbed hyperparameters. The checkpoint's random state is left out
(the run keeps its own seed), the optimizers' learning rates are set back to this manifest's after
their state (the Adam moments) is loaded (torch's `load_state_dict` would bring the old run's rates):
each policy's own in a multi-agent run, and in the learner actor of Ape-X and SAC with replay shards; and
the return windows start empty: the run's episodeReturnMean is of its own episodes, never the other
run's (a PBT member is scored on its own play of the round, not on the donor's).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kuberl.api.field_errors import FieldError, ManifestError
from kuberl.trainer.algorithms.base import COUNTERS_FILE, RNG_FILE
from kuberl.trainer.storage.base import StorageError
from kuberl.trainer.storage.checkpoints import load_checkpoint

if TYPE_CHECKING:
    from kuberl.trainer.algorithms.base import Algorithm
    from kuberl.trainer.storage.base import CheckpointInfo

FIELD = "spec.checkpoint.restoreFrom"


def restore_from(algo: Algorithm, uri: str, endpoint: str | None = None,
                 region: str | None = None) -> CheckpointInfo:
    """Load the checkpoint at `uri` (read through spec.storage's `endpoint` and `region`) into `algo`, keeping
    algo's learning rates and random state.
    Raises ManifestError (naming spec.checkpoint.restoreFrom) for a checkpoint that cannot be used."""
    try:
        files, info = load_checkpoint(uri, endpoint=endpoint, region=region)
    except StorageError as exc:
        raise ManifestError([FieldError(FIELD, str(exc))]) from None
    counters = json.loads(files.get(COUNTERS_FILE, b"{}"))
    algorithm = counters.get("algorithm")
    if algorithm is not None and algorithm != algo.spec.algorithm:
        raise ManifestError([FieldError(FIELD, f"{uri} is a checkpoint of {algorithm!r}, not "
                                               f"{algo.spec.algorithm!r}")])
    rates = algo.learning_rates()
    files = {name: data for name, data in files.items() if name != RNG_FILE}
    try:
        algo.set_state(files)
    except (RuntimeError, KeyError, ValueError) as exc:  # another network's shapes, a file it lacks
        raise ManifestError([FieldError(FIELD, f"{uri} does not fit this experiment (same algorithm, env "
                                               f"spaces and network needed): {str(exc)[:300]}")]) from None
    algo.set_learning_rates(rates)
    algo.forget_episodes()
    return info
