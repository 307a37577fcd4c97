"""spec.checkpoint.restoreFrom: start a run from another run's checkpoint, with this manifest's hyperparameters.

Used when the run has no checkpoint of its own (a run that has one resumes from it, so a restarted
head never goes back to the other run). PBT's exploit step is this: a lagging trial continues from a
leading trial's checkpoint with perturbed hyperparameters. The checkpoint's random state is left out
(the run keeps its own seed), the optimizer's learning rate is set back to this manifest's after
its state (the Adam moments) is loaded (torch's `load_state_dict` would bring the old run's rate), and
the return windows start empty: the run's episodeReturnMean is of its own episodes, never the other
run's (a PBT member is scored on its own play of the round, not on the donor's).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kuberl.api.validation import FieldError, ManifestError
from kuberl.trainer.algorithms.base import COUNTERS_FILE, RNG_FILE
from kuberl.trainer.storage.base import StorageError
from kuberl.trainer.storage.checkpoints import load_checkpoint

if TYPE_CHECKING:
    from kuberl.trainer.algorithms.base import Algorithm
    from kuberl.trainer.storage.base import CheckpointInfo

FIELD = "spec.checkpoint.restoreFrom"


def _optimizers(learner: Any) -> list[Any]:
    """The torch optimizers a learner in this process holds (none for a Ray actor's handle)."""
    import torch

    return [value for value in vars(learner).values() if isinstance(value, torch.optim.Optimizer)] \
        if hasattr(learner, "__dict__") else []


def restore_from(algo: Algorithm, uri: str, endpoint: str | None = None) -> CheckpointInfo:
    """Load the checkpoint at `uri` into `algo`, keeping algo's learning rates and random state.
    Raises ManifestError (naming spec.checkpoint.restoreFrom) for a checkpoint that cannot be used."""
    try:
        files, info = load_checkpoint(uri, endpoint=endpoint)
    except StorageError as exc:
        raise ManifestError([FieldError(FIELD, str(exc))]) from None
    counters = json.loads(files.get(COUNTERS_FILE, b"{}"))
    algorithm = counters.get("algorithm")
    if algorithm is not None and algorithm != algo.spec.algorithm:
        raise ManifestError([FieldError(FIELD, f"{uri} is a checkpoint of {algorithm!r}, not "
                                               f"{algo.spec.algorithm!r}")])
    learner = getattr(algo, "learner", None)
    rates = [[group["lr"] for group in opt.param_groups] for opt in _optimizers(learner)]
    files = {name: data for name, data in files.items() if name != RNG_FILE}
    try:
        algo.set_state(files)
    except (RuntimeError, KeyError, ValueError) as exc:  # another network's shapes, a file it lacks
        raise ManifestError([FieldError(FIELD, f"{uri} does not fit this experiment (same algorithm, env "
                                               f"spaces and network needed): {str(exc)[:300]}")]) from None
    for optimizer, lrs in zip(_optimizers(learner), rates, strict=True):
        for group, lr in zip(optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
    algo.forget_episodes()
    return info
