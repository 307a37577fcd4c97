"""Turn an RLSweep manifest into a validated RLSweep, or into errors that name fields.

Beyond the schema: each parameter's range against its type and the search, and every value a
parameter can take set into the template and validated as a whole RLExperiment, so that a path that
does not exist (`config.lrr`) or a range the algorithm refuses (`config.lr` up to 5) is reported at
`spec.parameters[i]` before any trial runs.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from kuberl.api.algorithms import REGISTRY, unknown_hyperparameter
from kuberl.api.base import manifest_names
from kuberl.api.field_errors import FieldError, ManifestError, nearest, validate_manifest_model
from kuberl.api.results import metric_error
from kuberl.api.sweep_types import KIND, PARAMETER_PATH_PATTERN, PLURAL, RLSweep, RLSweepSpec, SweepParameter
from kuberl.api.types import API_VERSION, RLExperimentSpec, RolloutsSpec
from kuberl.api.types import KIND as EXPERIMENT_KIND
from kuberl.api.validation import (
    ENVELOPE_FIELDS,
    may_name_multi_agent_env,
    parse_resource,
    unparsed_config_errors,
    validate_document,
    with_algorithm_hint,
)
from kuberl.api.yaml_text import apply_overrides, parse_yaml

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


# The template's sections that no parameter sets (config, rollouts and env.config are swept).
_TEMPLATE_SECTIONS = frozenset(manifest_names(RLExperimentSpec)) - {"config", "rollouts", "env"}


def _settable(algorithm: str | None) -> dict[str, list[str]]:
    """The fields a parameter may set under each of its roots, by their manifest names."""
    fields = {"rollouts": manifest_names(RolloutsSpec)}
    if algorithm in REGISTRY:
        fields["config"] = manifest_names(REGISTRY[algorithm].hyperparams)
    return fields


def _nearest_path(path: str, settable: dict[str, list[str]]) -> str | None:
    """The settable path a wrong one most likely means: its last name in manifest form (envs_per_worker), else
    the nearest name under a root, else the nearest whole path."""
    leaf = path.rpartition(".")[2]
    by_leaf = {name: f"{root}.{name}" for root, names in settable.items() for name in names}
    if to_camel(leaf) in by_leaf:
        return by_leaf[to_camel(leaf)]
    match = nearest(leaf, list(by_leaf))
    return by_leaf[match] if match else nearest(path, list(by_leaf.values()))


def parameter_path_error(path: str, algorithm: str | None) -> str | None:
    """Why `path` is not one a sweep may set in a template of `algorithm` (None: it may; an algorithm the
    template does not name leaves its hyperparameters to the template's own check)."""
    settable = _settable(algorithm)
    if re.match(PARAMETER_PATH_PATTERN, path):
        root, _, rest = path.partition(".")
        name = rest.split(".")[0]
        if path.startswith("env.config.") or root not in settable or name in settable[root]:
            return None
        what = f"a hyperparameter of {algorithm}" if root == "config" else "a field of rollouts"
        other = unknown_hyperparameter(name, algorithm, shown=path) if root == "config" and algorithm else None
        if other is not None:  # another algorithm's, or one this algorithm replaces
            return other
    else:
        what = ("a path a sweep can set: a parameter sets config.NAME (a hyperparameter), rollouts.NAME or "
                "env.config.NAME, in the manifest's camelCase")
        section = path.partition(".")[0]
        if section in _TEMPLATE_SECTIONS:
            return f"{path!r} is not {what}; spec.template.{section} is the same in every trial"
    match = _nearest_path(path, settable)
    return f"{path!r} is not {what}" + (f" (did you mean {match!r}?)" if match else "")


def _template_errors(index: int, parameter: SweepParameter, template: dict[str, Any],
                     sweep_name: str) -> list[FieldError]:
    """Each value the parameter can take (its ends, or every categorical value) set into the template and
    validated as an RLExperiment; the first refusal is reported, naming the parameter and the value."""
    where = f"spec.parameters[{index}]"
    if parameter.type == "categorical":
        probes = [(f"{where}.values[{i}]", v) for i, v in enumerate(parameter.values or [])]
    else:
        cast = int if parameter.type == "int" else float
        low, high = parameter.low, parameter.high
        if low is None or high is None:  # a missing end is a range error, reported before this check
            return []
        probes = [(f"{where}.low", cast(low)), (f"{where}.high", cast(high))]
    for field, value in probes:
        try:
            validate_document(template_document(trial_spec(template, {parameter.path: value}), sweep_name))
        except ManifestError as exc:
            reasons = "; ".join(str(e).replace("spec.", "template.", 1) for e in exc.errors[:3])
            if any(e.message.startswith("unknown field") for e in exc.errors):
                return [FieldError(f"{where}.path", f"{parameter.path!r} is not a field of the template: {reasons}")]
            return [FieldError(field, f"{parameter.path}={value!r} makes an invalid trial: {reasons}")]
    return []


def template_document(template: Any, sweep_name: str) -> dict[str, Any]:
    """A sweep's template (a spec in manifest form) as an RLExperiment manifest."""
    return {"apiVersion": API_VERSION, "kind": EXPERIMENT_KIND, "metadata": {"name": sweep_name}, "spec": template}


def under_template(errors: Iterable[FieldError]) -> list[FieldError]:
    """Errors of the template's RLExperiment (spec.x), named as the sweep's fields (spec.template.x)."""
    return [FieldError(e.path.replace("spec.", "spec.template.", 1), e.message) for e in errors]


def template_errors(template: Any, sweep_name: str) -> list[FieldError]:
    """The template (a spec in manifest form) validated as an RLExperiment, its errors named under
    spec.template."""
    try:
        validate_document(template_document(template, sweep_name))
    except ManifestError as exc:
        return under_template(exc.errors)
    return []


def parallelism_errors(parallelism: int, seeds_per_trial: int) -> list[FieldError]:
    """A trial starts all its seeds' runs at once, each taking a slot: fewer slots than seeds would overrun
    parallelism."""
    if parallelism >= seeds_per_trial:
        return []
    return [FieldError("spec.parallelism", f"is {parallelism}, less than spec.seedsPerTrial "
                       f"({seeds_per_trial}): a trial starts the runs of all its seeds at once, each taking "
                       f"a slot of parallelism, so set it to at least {seeds_per_trial}")]


def cross_field_errors(sweep: RLSweep) -> list[FieldError]:
    spec: RLSweepSpec = sweep.spec
    template = spec.template.to_manifest(exclude_unset=True)
    errors = template_errors(template, sweep.name)  # the template's own cross-field and hyperparameter checks
    template_valid = not errors
    errors += parallelism_errors(spec.parallelism, spec.seeds_per_trial)
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
        path_error = parameter_path_error(parameter.path, spec.template.algorithm)
        if path_error is not None:
            errors.append(FieldError(f"spec.parameters[{index}].path", path_error))
            continue
        range_errors = _range_errors(index, parameter, spec.search.algorithm)
        errors += range_errors or (_template_errors(index, parameter, template, sweep.name) if template_valid else [])
    errors += _metric_errors(spec.objective.metric, template)
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
    return errors


def _metric_errors(metric: Any, template: Any) -> list[FieldError]:
    """The objective against what the template's runs report; nothing where a callback may add results of its
    own (spec.template.callbacks), or the template does not say its algorithm."""
    if not isinstance(metric, str) or not isinstance(template, dict) or template.get("callbacks") is not None:
        return []
    algorithm, env = template.get("algorithm"), template.get("env")
    if algorithm not in REGISTRY:
        return []
    env_id = env.get("id") if isinstance(env, dict) else None
    why = metric_error(metric, algorithm, evaluation=template.get("evaluation") is not None,
                       multi_agent=isinstance(env_id, str) and may_name_multi_agent_env(env_id))
    return [] if why is None else [FieldError("spec.objective.metric", why)]


def unparsed_sweep_errors(spec: Any, found: list[FieldError]) -> list[FieldError]:
    """The checks of a sweep whose spec failed the schema that need only a few of its fields: the template's
    hyperparameters (all its checks where the schema passed it), each parameter's path and range, parallelism
    against seedsPerTrial, the objective; each where the schema did not already name it."""
    if not isinstance(spec, dict) or any(e.path in ENVELOPE_FIELDS for e in found):
        return []
    named = {e.path for e in found}
    template = spec.get("template")
    if isinstance(template, dict) and not any(_under(e.path, "spec.template") for e in found):
        errors = template_errors(template, "sweep")  # the schema passed it: its cross-field checks too
    else:
        errors = unparsed_config_errors(template, "spec.template", found)
    algorithm = template.get("algorithm") if isinstance(template, dict) else None
    parameters = spec.get("parameters")
    search = spec.get("search", {})
    search_algorithm = search.get("algorithm", "tpe") if isinstance(search, dict) else None
    for index, parameter in enumerate(parameters if isinstance(parameters, list) else []):
        errors += _unparsed_parameter_errors(index, parameter, algorithm, search_algorithm, found)
    seeds, parallelism = spec.get("seedsPerTrial", 1), spec.get("parallelism", 1)
    if _is_int(seeds) and _is_int(parallelism) and not named & {"spec.seedsPerTrial", "spec.parallelism"}:
        errors += parallelism_errors(parallelism, seeds)
    objective = spec.get("objective")
    if isinstance(objective, dict) and "spec.objective.metric" not in named:
        errors += _metric_errors(objective.get("metric", "episodeReturnMean"), template)
    return errors


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((f"{prefix}.", f"{prefix}["))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unparsed_parameter_errors(index: int, parameter: Any, algorithm: Any, search: Any,
                               found: list[FieldError]) -> list[FieldError]:
    """One parameter of a sweep whose spec failed the schema: its path, and where the parameter itself passed
    the schema, its range (the checks against the template need the whole sweep valid)."""
    where = f"spec.parameters[{index}]"
    path = parameter.get("path") if isinstance(parameter, dict) else None
    why = parameter_path_error(path, algorithm) if isinstance(path, str) and f"{where}.path" not in {
        e.path for e in found} else None
    if why is not None:
        return [FieldError(f"{where}.path", why)]
    if any(_under(e.path, where) for e in found) or not isinstance(parameter, dict):
        return []
    try:
        validated = validate_manifest_model(SweepParameter, parameter)
    except ValidationError:
        return []
    return _range_errors(index, validated, search if isinstance(search, str) else "")


def validate_sweep_document(doc: dict[str, Any], *, strict: bool = True) -> RLSweep:
    """Validate a parsed RLSweep manifest; raises ManifestError naming every field at fault."""
    try:
        sweep = parse_resource(doc, RLSweep, KIND, strict=strict)
    except ManifestError as exc:
        spec = doc.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        errors = with_algorithm_hint(exc.errors, template, "spec.template")
        raise ManifestError(errors + unparsed_sweep_errors(spec, exc.errors)) from None
    errors = cross_field_errors(sweep)
    if errors:
        raise ManifestError(errors)
    pbt = sweep.spec.search.pbt
    if sweep.spec.search.algorithm == "pbt" and pbt is not None and "max_trials" not in sweep.spec.model_fields_set:
        sweep.spec.max_trials = pbt.population_size  # its manifest form (kuberl sweep's sweep.yaml) validates again
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
    template = template_document(spec.template.to_manifest(exclude_unset=True), sweep.name)
    errors = under_template(e for e in cluster_errors(validate_document(template)) if e.path != "spec.storage.uri")
    if spec.objective.metric not in STATUS_METRICS:
        errors.append(FieldError("spec.objective.metric", f"the operator reads trials' status, which reports "
                                 f"{' and '.join(STATUS_METRICS)}; {spec.objective.metric!r} is only for "
                                 "`kuberl sweep`"))
    if spec.template.storage.uri is None or spec.template.storage.uri.startswith("file://"):
        errors.append(FieldError("spec.template.storage.uri", "required in a cluster (s3://bucket/prefix)"))
    return errors
