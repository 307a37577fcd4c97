"""A run's layout under its root: the spec, results.jsonl, checkpoints and traces."""

from __future__ import annotations

import os
import time
from typing import Any

import yaml

from kuberl.api.field_errors import ManifestError
from kuberl.api.yaml_text import load_yaml
from kuberl.trainer.storage.base import ObjectStore
from kuberl.trainer.storage.checkpoints import LATEST, read_latest_pointer
from kuberl.trainer.storage.errors import NotFound
from kuberl.trainer.storage.jsonl import dumps_record
from kuberl.trainer.storage.results import EXIT_FLUSH_SECONDS, RESULTS, open_results
from kuberl.trainer.storage.traces import TraceWriter

__all__ = ["EXIT_FLUSH_SECONDS", "RESULTS", "SPEC", "RunStorage", "fresh_run_root_uri", "run_root_uri"]

SPEC = "experiment.yaml"


def run_root_uri(storage_uri: str | None, namespace: str | None, name: str) -> str:
    """The run's root: storage_uri/NS/NAME in a cluster, storage_uri/NAME locally,
    file://$PWD/kuberl-runs/NAME with no storage_uri."""
    if not storage_uri:
        return "file://" + os.path.join(os.path.abspath(os.getcwd()), "kuberl-runs", name)
    base = storage_uri.rstrip("/")
    return f"{base}/{namespace}/{name}" if namespace else f"{base}/{name}"


def fresh_run_root_uri(root_uri: str, now: float | None = None) -> str:
    """A new root beside `root_uri` for `kuberl train --fresh`: ROOT-YYYYmmdd-HHMMSS."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{root_uri.rstrip('/')}-{stamp}"


def _policy_names(spec: dict[str, Any]) -> list[str]:
    """The policy names of a manifest's spec: spec.multiAgent.policies, or the one shared policy."""
    policies = (spec.get("multiAgent") or {}).get("policies") or []
    return [str(p.get("name")) for p in policies if isinstance(p, dict)] or ["shared"]


class RunStorage:
    """The files of one run. results.jsonl appends never block on a remote store (results.py)."""

    def __init__(self, store: ObjectStore, *, flush_seconds: float = 2.0, attempt: int | None = None) -> None:
        self.store = store
        self.uri = store.uri
        self._results = open_results(store, flush_seconds=flush_seconds, attempt=attempt)
        self._closed = False

    @property
    def attempt(self) -> int | None:
        """With an attempt, a rewrite of results.jsonl first checks that no newer attempt owns the run
        (`latest`), so a zombie head cannot clobber its successor's results."""
        return self._results.attempt

    @attempt.setter
    def attempt(self, attempt: int | None) -> None:
        self._results.attempt = attempt

    @property
    def fenced(self) -> bool:
        return self._results.fenced

    @property
    def last_error(self) -> Exception | None:
        return self._results.last_error

    # -- the spec ------------------------------------------------------------------------------------
    def write_spec(self, text: str) -> None:
        self.store.put_bytes(SPEC, text.encode())

    def read_spec(self) -> str | None:
        try:
            return self.store.get_bytes(SPEC).decode()
        except NotFound:
            return None

    def resume_conflicts(self, spec: dict[str, Any]) -> list[str]:
        """Why this run cannot resume with `spec` (a manifest dict): other algorithm or env id."""
        old_text = self.read_spec()
        if old_text is None:
            return []
        try:
            old = (load_yaml(old_text) or {}).get("spec") or {}
        except (yaml.YAMLError, ManifestError):
            return []
        new = spec.get("spec") or {}
        problems = []
        for path, old_value, new_value in (
            ("spec.algorithm", old.get("algorithm"), new.get("algorithm")),
            ("spec.env.id", (old.get("env") or {}).get("id"), (new.get("env") or {}).get("id")),
        ):
            if old_value is not None and new_value is not None and old_value != new_value:
                problems.append(
                    f"{path}: the run at {self.uri} was trained with {old_value!r}, not {new_value!r}; "
                    "it cannot resume (use --fresh or another storage.uri)"
                )
        old_policies, new_policies = _policy_names(old), _policy_names(new)
        if not problems and not set(new_policies) <= set(old_policies):
            problems.append(
                f"spec.multiAgent.policies: the run at {self.uri} was trained with the policies "
                f"{', '.join(old_policies)}; {', '.join(sorted(set(new_policies) - set(old_policies)))} is not among "
                "them, so it cannot resume (use --fresh or another storage.uri)"
            )
        return problems

    def has_checkpoints(self) -> bool:
        return self.store.exists(LATEST) or bool(self.store.list("checkpoints/"))

    def next_attempt(self) -> int:
        """One more than the attempt that wrote `latest` (0 for a new run): for local resumes,
        so that fencing treats the rerun as the newest writer."""
        pointer = read_latest_pointer(self.store)
        return 0 if pointer is None else pointer.attempt + 1

    # -- results.jsonl -------------------------------------------------------------------------------
    def read_results(self) -> list[dict[str, Any]]:
        return self._results.read()

    def append_result(self, result: dict[str, Any]) -> None:
        self._results.append(dumps_record(result))

    def truncate_results(self, after_iteration: int) -> int:
        """Drop result lines with iteration > after_iteration (a resume from an older checkpoint),
        so timesteps never go backwards. Returns how many lines were dropped."""
        kept, dropped = [], 0
        for record in self.read_results():
            if int(record.get("iteration", 0)) > after_iteration:
                dropped += 1
            else:
                kept.append(dumps_record(record))
        if dropped:
            self._results.replace(kept)
        return dropped

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until results.jsonl holds every appended line; False on timeout."""
        return self._results.flush(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._results.close(timeout)

    # -- traces --------------------------------------------------------------------------------------
    def trace_writer(self, worker: str, **options: Any) -> TraceWriter:
        return TraceWriter(self.store, worker, **options)
