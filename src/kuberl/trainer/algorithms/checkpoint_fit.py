"""Whether a checkpoint fits an algorithm: its hyperparameters against those of the experiment the checkpoint
holds (its experiment.yaml, written by `kuberl train` and by `Algorithm.save()`).

The settings that shape the networks and what they see (`MODEL_FIELDS`) must match: a checkpoint of other
layer widths does not load, and one of another activation or observation filter loads into a policy that acts
otherwise (a mean_std filter's statistics are dropped by an algorithm built without one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml
from pydantic import ValidationError

from kuberl.api.algorithms import REGISTRY
from kuberl.api.base import StrictModel
from kuberl.api.field_errors import FieldError, ManifestError, validate_manifest_model
from kuberl.api.hyperparams import CommonParams
from kuberl.api.validation import in_manifest_names
from kuberl.api.yaml_text import load_yaml
from kuberl.trainer.storage.run import SPEC

MODEL_FIELDS = ("hidden", "model", "activation", "observation_filter", "dueling")


def stored_params(files: dict[str, bytes], params: CommonParams) -> CommonParams | None:
    """The hyperparameters (spec.config) of the experiment a checkpoint holds, where they are of the same
    algorithm as `params`; else None (no experiment.yaml that reads, or another algorithm's: refused elsewhere)."""
    text = files.get(SPEC)
    if text is None:
        return None
    try:
        spec = in_manifest_names(load_yaml(text.decode()))["spec"]
        stored = validate_manifest_model(REGISTRY[spec["algorithm"]].hyperparams, spec.get("config") or {})
    except (yaml.YAMLError, ManifestError, UnicodeDecodeError, ValidationError, KeyError, TypeError, AttributeError):
        return None
    return stored if type(stored) is type(params) else None


def manifest_name(params: CommonParams, field: str) -> str:
    """A hyperparameter's name in a manifest (observationFilter for observation_filter)."""
    return type(params).model_fields[field].alias or field


def shown(value: Any) -> str:
    return repr(value.to_manifest() if isinstance(value, StrictModel) else value)


def differing_fields(stored: CommonParams, params: CommonParams, fields: Iterable[str] | None = None) -> list[str]:
    """The fields among `fields` (default: all but the seed) whose values differ, in field order."""
    names = type(params).model_fields if fields is None else fields
    return [name for name in names if name != "seed" and name in type(params).model_fields
            and getattr(stored, name, None) != getattr(params, name)]


def model_mismatch_errors(files: dict[str, bytes], params: CommonParams, uri: str) -> list[FieldError]:
    """One error per setting of `MODEL_FIELDS` that `params` has other than the checkpoint's experiment.yaml."""
    stored = stored_params(files, params)
    if stored is None:
        return []
    return [FieldError(f"spec.config.{manifest_name(params, name)}",
                       f"is {shown(getattr(params, name))} here but {shown(getattr(stored, name))} in the "
                       f"experiment of the checkpoint {uri}; build with its value (.training({name}=...))")
            for name in differing_fields(stored, params, MODEL_FIELDS)]


def misfit_error(files: dict[str, bytes], params: CommonParams, problem: str, advice: str,
                 detail: str = "") -> FieldError:
    """A checkpoint that does not fit an algorithm of `params`, as one error naming the settings of
    `MODEL_FIELDS` that differ from its experiment.yaml; where none do, `detail` (what loading it raised)."""
    stored = stored_params(files, params)
    names = [] if stored is None else differing_fields(stored, params, MODEL_FIELDS)
    if stored is None or not names:
        return FieldError("spec", f"{problem} ({detail}); {advice}" if detail else f"{problem}; {advice}")
    path = f"spec.config.{manifest_name(params, names[0])}" if len(names) == 1 else "spec.config"
    was = ", ".join(f"{manifest_name(params, n)}={shown(getattr(stored, n))}" for n in names)
    now = ", ".join(f"{manifest_name(params, n)}={shown(getattr(params, n))}" for n in names)
    return FieldError(path, f"{problem}: it was trained with {was}, not {now}; {advice}")
