"""Turn an RLSweep manifest into a validated RLSweep, or into errors that name fields.

Beyond the schema: each parameter's range against its type and the search, and every value a
parameter can take set into the template and validated as a whole RLExperiment, so that a path that
does not exist (`config.lrr`) or a range the algorithm refuses (`config.lr` up to 5) is reported at
`spec.parameters[i]` before any trial runs.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from kuberl.api.sweep_types import KIND, PLURAL, RLSweep, RLSweepSpec, SweepParameter
from kuberl.api.types import API_VERSION
from kuberl.api.validation import (
    FieldError,
    ManifestError,
    apply_overrides,
    parse_resource,
    parse_yaml,
    validate_document,
)

__all__ = ["KIND", "PLURAL", "grid_values", "load_sweep", "set_path", "trial_spec", "validate_sweep_document"]

MAX_GRID_POINTS = 10_000


def set_path(spec: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at a dotted path of a spec mapping, creating mappings on the way."""
    parts = path.split(".")
    node = spec
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def trial_spec(template: dict[str, Any], params: dict[str, Any], seed: int | None = None) -> dict[str, Any]:
    """The template (a spec in manifest form) with the trial's values at their paths, and config.seed."""
    spec = copy.deepcopy(template)
    for path, value in params.items():
        set_path(spec, path, value)
    if seed is not None:
        set_path(spec, "config.seed", seed)
    return spec


def grid_values(parameter: SweepParameter) -> list[Any]:
    """The values a grid search tries for one parameter (low to high by step, or the categorical values)."""
    if parameter.type == "categorical":
        return list(parameter.values or [])
    assert parameter.low is not None and parameter.high is not None
    step = parameter.step if parameter.step is not None else 1.0
    count = int(math.floor((parameter.high - parameter.low) / step + 1e-9)) + 1
    values = [parameter.low + i * step for i in range(count)]
    if parameter.type == "int":
        return [int(round(v)) for v in values]
    return [round(v, 12) for v in values]


def _range_errors(index: int, parameter: SweepParameter, search: str) -> list[FieldError]:
    where = f"spec.parameters[{index}]"
    errors: list[FieldError] = []
    if parameter.type == "categorical":
        if parameter.values is None:
            errors.append(FieldError(f"{where}.values", "required for a categorical parameter"))
        for name in ("low", "high", "step"):
            if getattr(parameter, name) is not None:
                errors.append(FieldError(f"{where}.{name}", "only for float and int parameters (categorical takes "
                                         "values)"))
        if parameter.log:
            errors.append(FieldError(f"{where}.log", "only for float and int parameters"))
        return errors
    if parameter.values is not None:
        errors.append(FieldError(f"{where}.values", f"only for categorical parameters ({parameter.type} takes low "
                                 "and high)"))
    for name in ("low", "high"):
        if getattr(parameter, name) is None:
            errors.append(FieldError(f"{where}.{name}", f"required for a {parameter.type} parameter"))
    if errors:
        return errors
    assert parameter.low is not None and parameter.high is not None
    if parameter.type == "int":
        for name in ("low", "high", "step"):
            value = getattr(parameter, name)
            if value is not None and value != int(value):
                errors.append(FieldError(f"{where}.{name}", "must be a whole number for an int parameter"))
    if not parameter.low < parameter.high:
        errors.append(FieldError(f"{where}.high", f"must be greater than low ({parameter.low})"))
    if parameter.log and parameter.low <= 0:
        errors.append(FieldError(f"{where}.low", "must be > 0 with log: true"))
    if parameter.log and parameter.step is not None:
        errors.append(FieldError(f"{where}.step", "cannot be combined with log: true (Optuna samples a log range "
                                 "continuously)"))
    if search == "grid" and parameter.type == "float" and parameter.step is None:
        errors.append(FieldError(f"{where}.step", "grid search needs a step for a float parameter (or make it "
                                 "categorical)"))
    return errors


def _template_errors(index: int, parameter: SweepParameter, template: dict[str, Any],
                     sweep_name: str) -> list[FieldError]:
    """Each value the parameter can take (its ends, or every categorical value) set into the template and
    validated as an RLExperiment; the first refusal is reported, naming the parameter and the value."""
    where = f"spec.parameters[{index}]"
    if parameter.type == "categorical":
        probes = [(f"{where}.values[{i}]", v) for i, v in enumerate(parameter.values or [])]
    else:
        cast = int if parameter.type == "int" else float
        probes = [(f"{where}.low", cast(parameter.low)), (f"{where}.high", cast(parameter.high))]
    for field, value in probes:
        doc = {"apiVersion": API_VERSION, "kind": "RLExperiment", "metadata": {"name": sweep_name},
               "spec": trial_spec(template, {parameter.path: value})}
        try:
            validate_document(doc)
        except ManifestError as exc:
            reasons = "; ".join(str(e).replace("spec.", "template.", 1) for e in exc.errors[:3])
            if any(e.message.startswith("unknown field") for e in exc.errors):
                return [FieldError(f"{where}.path", f"{parameter.path!r} is not a field of the template: {reasons}")]
            return [FieldError(field, f"{parameter.path}={value!r} makes an invalid trial: {reasons}")]
    return []


def cross_field_errors(sweep: RLSweep) -> list[FieldError]:
    spec: RLSweepSpec = sweep.spec
    template = spec.template.to_manifest()
    try:  # the template's own cross-field and hyperparameter checks, named under spec.template
        validate_document({"apiVersion": API_VERSION, "kind": "RLExperiment", "metadata": {"name": sweep.name},
                           "spec": template})
    except ManifestError as exc:
        return [FieldError(e.path.replace("spec.", "spec.template.", 1), e.message) for e in exc.errors]
    errors: list[FieldError] = []
    paths = [p.path for p in spec.parameters]
    for index, parameter in enumerate(spec.parameters):
        if paths.index(parameter.path) != index:
            errors.append(FieldError(f"spec.parameters[{index}].path", f"{parameter.path!r} is already swept by "
                                     f"spec.parameters[{paths.index(parameter.path)}]"))
            continue
        if parameter.path == "config.seed":
            errors.append(FieldError(f"spec.parameters[{index}].path", "config.seed is set per run by seedsPerTrial; "
                                     "sweep other fields"))
            continue
        range_errors = _range_errors(index, parameter, spec.search.algorithm)
        errors += range_errors or _template_errors(index, parameter, template, sweep.name)
    search = spec.search
    if search.algorithm == "pbt":
        if search.pbt is None:
            errors.append(FieldError("spec.search.pbt", "required with algorithm: pbt (populationSize, "
                                     "perturbationInterval)"))
        else:
            if "max_trials" in spec.model_fields_set and spec.max_trials != search.pbt.population_size:
                errors.append(FieldError("spec.maxTrials", "with pbt the trials are the population: leave it unset "
                                         f"or {search.pbt.population_size} (spec.search.pbt.populationSize)"))
            if spec.template.stop.timesteps is None:
                errors.append(FieldError("spec.template.stop.timesteps", "pbt needs a budget in env steps (its "
                                         "perturbation interval is in steps)"))
        if spec.early_stopping is not None:
            errors.append(FieldError("spec.earlyStopping", "pbt replaces lagging trials itself; remove earlyStopping"))
        if spec.seeds_per_trial != 1:
            errors.append(FieldError("spec.seedsPerTrial", "pbt trains one run per member; leave it at 1"))
    elif search.pbt is not None:
        errors.append(FieldError("spec.search.pbt", f"only with algorithm: pbt, not {search.algorithm}"))
    if search.algorithm == "grid" and not errors:
        points = 1
        for parameter in spec.parameters:
            points *= max(1, len(grid_values(parameter)))
        if points > MAX_GRID_POINTS:
            errors.append(FieldError("spec.parameters", f"the grid has {points} points, more than {MAX_GRID_POINTS}"))
    early = spec.early_stopping
    if early is not None and early.algorithm != "none" and spec.template.stop.timesteps is not None \
            and early.interval > spec.template.stop.timesteps:
        errors.append(FieldError("spec.earlyStopping.interval", "is longer than spec.template.stop.timesteps: no "
                                 "intermediate result would ever be reported"))
    metric = spec.objective.metric
    if metric == "evaluationReturnMean" and spec.template.evaluation is None:
        errors.append(FieldError("spec.objective.metric", "evaluationReturnMean needs spec.template.evaluation"))
    return errors


def validate_sweep_document(doc: dict[str, Any], *, strict: bool = True) -> RLSweep:
    """Validate a parsed RLSweep manifest; raises ManifestError naming every field at fault."""
    sweep = parse_resource(doc, RLSweep, KIND, strict=strict)
    errors = cross_field_errors(sweep)
    if errors:
        raise ManifestError(errors)
    return sweep


def load_sweep(text: str, *, overrides: list[str] | None = None, source: str = "manifest") -> RLSweep:
    """Parse, override (paths relative to spec, as `--set maxTrials=4`) and validate an RLSweep manifest."""
    doc = parse_yaml(text, source)
    if overrides:
        doc = apply_overrides(doc, overrides)
    return validate_sweep_document(doc)


# What an RLSweep's status reports of its trials' RLExperiments, so what the operator can optimise.
STATUS_METRICS = ("episodeReturnMean", "evaluationReturnMean")


def sweep_cluster_errors(sweep: RLSweep) -> list[FieldError]:
    """What a sweep needs in a cluster beyond its schema: the template's cluster checks, an objective its
    trials' status reports, s3:// storage (the operator, `kuberl submit` and `kuberl validate --cluster`)."""
    from kuberl.api.validation import cluster_errors, validate_document

    spec = sweep.spec
    template = {"apiVersion": API_VERSION, "kind": "RLExperiment", "metadata": {"name": sweep.name},
                "spec": spec.template.to_manifest()}
    errors = [FieldError(e.path.replace("spec.", "spec.template.", 1), e.message)
              for e in cluster_errors(validate_document(template)) if e.path != "spec.storage.uri"]
    if spec.objective.metric not in STATUS_METRICS:
        errors.append(FieldError("spec.objective.metric", f"the operator reads trials' status, which reports "
                                 f"{' and '.join(STATUS_METRICS)}; {spec.objective.metric!r} is only for "
                                 "`kuberl sweep`"))
    if spec.template.storage.uri is None or spec.template.storage.uri.startswith("file://"):
        errors.append(FieldError("spec.template.storage.uri", "required in a cluster (s3://bucket/prefix)"))
    return errors
