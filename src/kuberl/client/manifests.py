"""What `submit` sends: a manifest from a file, YAML text, a dict, an RLExperiment or an AlgorithmConfig,
with --set overrides, validated as the operator and `kuberl validate --cluster` validate it. An RLSweep
manifest is validated as a sweep (kuberl.api.sweep_validation) and created as an rlsweep.

The document sent is the one the user wrote (with the overrides), not the validated model dumped
with every default: fields left out stay the operator's to default (its head and worker sizes).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from kuberl.api.field_errors import FieldError, ManifestError, fail
from kuberl.api.sweep_types import RLSweep
from kuberl.api.types import RLExperiment
from kuberl.api.validation import cluster_errors, validate_document
from kuberl.api.yaml_text import apply_overrides, parse_yaml


@runtime_checkable
class HasDocument(Protocol):
    """An AlgorithmConfig (kuberl.trainer.algorithms.config), or anything that gives a manifest document."""

    def to_document(self) -> dict[str, Any]: ...


ManifestSource = dict[str, Any] | str | Path | RLExperiment | HasDocument


def read_manifest_file(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise fail("-f", f"{path}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail("-f", f"{path}: cannot read: {exc}") from None
    return parse_yaml(text, str(path))


def manifest_document(source: ManifestSource) -> dict[str, Any]:
    """The manifest as a new dict (a str is a file's path; use parse_yaml for YAML text)."""
    if isinstance(source, dict):
        return copy.deepcopy(source)
    if isinstance(source, str | Path):
        return read_manifest_file(source)
    if isinstance(source, RLExperiment):
        doc = source.to_manifest(exclude_unset=True)  # what it leaves unset stays the operator's to default
        doc.pop("status", None)
        return doc
    if isinstance(source, HasDocument):
        return source.to_document()
    raise TypeError(f"cannot submit a {type(source).__name__}: give a dict, a path, an RLExperiment or an AlgorithmConfig")


def prepare(source: ManifestSource, overrides: list[str] | None = None, *, namespace: str,
            namespace_given: bool) -> tuple[dict[str, Any], RLExperiment | RLSweep]:
    """The document to create and its validated form, in `namespace`; ManifestError names every bad field,
    including the checks only a cluster run needs (storage.uri must be s3://)."""
    doc = manifest_document(source)
    if overrides:
        doc = apply_overrides(doc, overrides)
    metadata = doc.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise fail("metadata", "must be a mapping")
    own = metadata.get("namespace")
    if own and namespace_given and own != namespace:
        raise fail("metadata.namespace", f"is {own!r}, but the command asks for namespace {namespace!r}")
    metadata["namespace"] = own or namespace
    if doc.get("kind") == "RLSweep":
        from kuberl.api.sweep_validation import sweep_cluster_errors, validate_sweep_document

        sweep = validate_sweep_document(doc)
        sweep_errors = sweep_cluster_errors(sweep)
        if sweep_errors:
            raise ManifestError(sweep_errors)
        return doc, sweep
    experiment = validate_document(doc)
    errors: list[FieldError] = cluster_errors(experiment)
    if errors:
        raise ManifestError(errors)
    return doc, experiment
