"""checkpoint.export: the run's policy exported with every checkpoint, into exports/ in its storage.

The policy is copied on the training thread when a checkpoint is taken (a consistent snapshot of
weights and filter); saving the files and uploading them run on the background writer, with its
retries. Files are `exports/policy-ITERATION.onnx` and `.pt`; the newest `checkpoint.keep`
iterations are kept, as checkpoints are.
"""

from __future__ import annotations

import functools
import logging
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kuberl.trainer.export.formats import SUFFIXES, save_policy
from kuberl.trainer.export.policy import describe, example_input, exported_policy
from kuberl.trainer.storage.background import BackgroundWriter
from kuberl.trainer.storage.base import ObjectStore

log = logging.getLogger(__name__)

EXPORTS = "exports"
# A multi-agent run exports each policy: policy-ITERATION-NAME.onnx.
_EXPORT_RE = re.compile(r"^exports/policy-(?P<iteration>\d{6,})(-(?P<policy>[a-z0-9][-a-z0-9_]*))?\.(onnx|pt)$")


def export_key(iteration: int, fmt: str, policy: str | None = None) -> str:
    return f"{EXPORTS}/policy-{iteration:06d}{f'-{policy}' if policy else ''}{SUFFIXES[fmt]}"


class RunExports:
    def __init__(self, store: ObjectStore, formats: Sequence[str], keep: int, background: BackgroundWriter) -> None:
        self.store = store
        self.formats = list(formats)
        self.keep = keep
        self.background = background
        self.sizes: dict[str, int] = {}  # key -> bytes, of what this process exported

    def submit(self, algo: Any, iteration: int) -> None:
        """Export the algorithm's current policy (a multi-agent run: each of its policies) as the policy of
        checkpoint `iteration`."""
        if not self.formats:
            return
        names: tuple[str | None, ...] = tuple(getattr(algo, "policy_names", ())) or (None,)
        for name in names:
            if name is not None:
                algo.select_policy(name)
            policy = exported_policy(algo)
            example = example_input(algo.observation_space)
            description = describe(algo, checkpoint=self.store.url(f"checkpoints/{iteration:06d}"),
                                   **({"policy": name} if name else {}))
            for fmt in self.formats:
                key = export_key(iteration, fmt, name)
                self.background.submit(key, functools.partial(self._save, policy, example, fmt, key, description))
        if names[0] is not None:
            algo.select_policy(names[0])  # what the rest of the run describes: the first policy, as before
        self.background.submit(f"{EXPORTS}/ retention", self._prune)

    def _save(self, policy: Any, example: Any, fmt: str, key: str, description: str) -> None:
        with tempfile.TemporaryDirectory(prefix="kuberl-export-") as tmp:
            path = Path(tmp) / Path(key).name
            save_policy(policy, example, fmt, path, description)
            self.store.put_file(key, path)
            self.sizes[key] = path.stat().st_size

    def _prune(self) -> None:
        exported = [(int(m["iteration"]), key) for key in self.store.list(f"{EXPORTS}/")
                    if (m := _EXPORT_RE.match(key))]
        kept = set(sorted({iteration for iteration, _ in exported})[-self.keep:])
        for iteration, key in exported:
            if iteration not in kept:
                self.store.delete(key)
