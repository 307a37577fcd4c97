"""Turn manifest text into a validated RLExperiment, or into errors that name fields.

Everything here is pure and light (pyyaml, pydantic): the operator and the CLI
share it. Checks that need the trainer's libraries (does the env exist, does
the algorithm support its action space) live in `kuberl.trainer.run.checks`; both read the
algorithm registry, `kuberl.api.algorithms`.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from kuberl.api.algorithms import REGISTRY, listed, unknown_hyperparameter
from kuberl.api.hyperparams import CommonParams, DQNParams, PPOParams, ShardReplayParams
from kuberl.api.multiagent import policy_errors, policy_params
from kuberl.api.podtemplate import template_errors
from kuberl.api.storage_uri import ACCEPTED as STORAGE_ACCEPTED
from kuberl.api.storage_uri import storage_uri_problem
from kuberl.api.types import (
    API_VERSION,
    CLASS_PATH_PATTERN,
    CPU_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    ENDPOINT_PATTERN,
    IMAGE_PATTERN,
    KIND,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MEMORY_PATTERN,
    POLICY_NAME_PATTERN,
    PYTHON_NAME,
    STORAGE_URI_PATTERN,
    WRAPPER_NAME_PATTERN,
    RLExperiment,
)

ResourceT = TypeVar("ResourceT", bound=BaseModel)
ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_MANIFEST_BYTES = 1_000_000
MAX_YAML_NODES = 100_000
MAX_NESTING = 64  # far deeper than any spec; serializers and parsers with recursion limits stay safe
INT64_RANGE = (-(2**63), 2**63 - 1)  # the Kubernetes API's integers


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ManifestError(ValueError):
    """A manifest a user must fix; each problem names the field."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def fail(path: str, message: str) -> ManifestError:
    return ManifestError([FieldError(path, message)])


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs ("billion laughs") by counting expanded nodes, and reads numbers in
    exponent form as YAML 1.2 (and so kubectl) does: PyYAML's YAML 1.1 resolver takes `3e-4`, `1e5` and
    `1.0e5` for strings, as it wants a dot and a signed exponent."""

    def construct_document(self, node: yaml.Node) -> Any:
        _count_nodes(node, budget=[MAX_YAML_NODES])
        return super().construct_document(node)


class _NumberQuotingDumper(yaml.SafeDumper):
    """SafeDumper that quotes a string load_yaml would read back as a number (`"1e5"`, `"3e-4"`)."""


for _resolver_class in (_BoundedLoader, _NumberQuotingDumper):
    _resolver_class.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$"),
        list("-+.0123456789"))


def dump_yaml(document: Any, **options: Any) -> str:
    """YAML as kuberl writes it (a run's experiment.yaml, the operator's ConfigMap), read back the same by
    load_yaml."""
    text: str = yaml.dump(document, Dumper=_NumberQuotingDumper, **options)
    return text


def load_yaml(text: str) -> Any:
    """One YAML document (a manifest's, a --set value's) as kuberl reads every manifest; raises
    yaml.YAMLError."""
    return yaml.load(text, Loader=_BoundedLoader)


def _count_nodes(node: yaml.Node, budget: list[int]) -> None:
    stack = [node]
    while stack:
        current = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise fail("", f"manifest too large: more than {MAX_YAML_NODES} YAML nodes once aliases are expanded")
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.extend((key, value))


def parse_yaml(text: str, source: str = "manifest") -> dict[str, Any]:
    """Parse one YAML document into a mapping, with the line of any syntax error."""
    if len(text.encode("utf-8", errors="replace")) > MAX_MANIFEST_BYTES:
        raise fail("", f"{source}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        docs = [d for d in yaml.load_all(text, Loader=_BoundedLoader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise fail("", f"{source}: invalid YAML at {where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise fail("", f"{source}: invalid YAML: {exc}") from None
    except RecursionError:
        raise fail("", f"{source}: nested too deeply") from None
    if len(docs) != 1:
        raise fail("", f"{source}: expected exactly one YAML document, found {len(docs)}")
    if not isinstance(docs[0], dict):
        raise fail("", f"{source}: expected a mapping (apiVersion, kind, metadata, spec)")
    return docs[0]


def apply_overrides(doc: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `--set path=value` overrides; paths are relative to `spec` unless they start with a top-level key."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise fail("--set", f"{item!r}: expected key=value, such as rollouts.workers=2")
        parts = key.split(".")
        if parts[0] not in ("spec", "metadata", "apiVersion", "kind"):
            parts = ["spec", *parts]
        try:
            value = load_yaml(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = doc
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise fail(".".join(parts[: i + 1]), f"--set {key}: is not a mapping")
            node = child
        node[parts[-1]] = value
    return doc


def nearest(word: str, candidates: list[str]) -> str | None:
    """The candidate a misspelt `word` most likely means, or None when none is close."""
    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return match[0] if match else None


def suggestion(word: str, candidates: list[str]) -> str:
    """" (did you mean 'x'?)" for the nearest candidate, or nothing."""
    match = nearest(word, candidates)
    return f" (did you mean {match!r}?)" if match else ""


def _model_fields(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _unknown_field_hint(key: str, model: type[BaseModel]) -> str:
    """A Python name (envs_per_worker) is answered with its manifest name exactly; anything else with the
    nearest manifest name."""
    field = model.model_fields.get(key)
    if field is not None and field.alias and field.alias != key:
        return f" (did you mean {field.alias!r}?)"
    return suggestion(key, _model_fields(model))


def validate_manifest_model(model: type[ModelT], data: Any) -> ModelT:
    """`data` (a manifest's mapping) as `model`, read by the manifest's camelCase names only: the CRD knows no
    other, so a Python name (envs_per_worker) that passed here would be pruned by the API server unread."""
    return model.model_validate(data, by_alias=True, by_name=False)


def _resolve_model(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that a location's parent refers to, for did-you-mean hints."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int):  # an item of a list of models: the list's field already named its model
            continue
        if model is None:
            return None
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        model = _model_in(field.annotation)
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, optional, or as the items of a list."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        if getattr(candidate, "__origin__", None) is list:
            return _model_in(candidate.__args__[0])
    return None


_MESSAGES: dict[str, Callable[[dict[str, Any]], str]] = {
    "greater_than_equal": lambda ctx: f"must be >= {ctx['ge']}",
    "greater_than": lambda ctx: f"must be > {ctx['gt']}",
    "less_than_equal": lambda ctx: f"must be <= {ctx['le']}",
    "less_than": lambda ctx: f"must be < {ctx['lt']}",
    "missing": lambda ctx: "required field is missing",
    "string_too_short": lambda ctx: f"must be at least {ctx['min_length']} characters",
    "string_too_long": lambda ctx: f"must be at most {ctx['max_length']} characters",
    "too_short": lambda ctx: f"must have at least {ctx['min_length']} items",
    "too_long": lambda ctx: f"must have at most {ctx['max_length']} items",
    "int_type": lambda ctx: "must be an integer",
    "int_parsing": lambda ctx: "must be an integer",
    "int_from_float": lambda ctx: "must be a whole number",
    "float_type": lambda ctx: "must be a number",
    "float_parsing": lambda ctx: "must be a number",
    "bool_type": lambda ctx: "must be true or false",
    "bool_parsing": lambda ctx: "must be true or false",
    "string_type": lambda ctx: "must be a string",
    "dict_type": lambda ctx: "must be a mapping",
    "model_type": lambda ctx: "must be a mapping",
    "model_attributes_type": lambda ctx: "must be a mapping",
    "list_type": lambda ctx: "must be a list",
    "literal_error": lambda ctx: f"must be one of {ctx['expected']}",
    "value_error": lambda ctx: str(ctx.get("error", "invalid value")),
}


# Errors of a value's type: the message shows the value, since YAML may have read it otherwise than meant.
_TYPE_ERRORS = frozenset({"int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
                          "bool_type", "bool_parsing", "string_type", "dict_type", "model_type",
                          "model_attributes_type", "list_type"})

# What each pattern of the schema accepts, in words (spec.storage.uri's: kuberl.api.storage_uri).
_ENDS = "starting and ending with a letter or digit"
_PATTERN_WORDS: dict[str, str] = {
    DNS_SUBDOMAIN_PATTERN: f"must be lowercase letters, digits, '-' and '.', {_ENDS}",
    ENDPOINT_PATTERN: "must be an http:// or https:// URL such as http://minio:9000",
    CPU_PATTERN: "must be a number of CPUs such as 2, 0.5 or 500m",
    MEMORY_PATTERN: "must be an amount of memory such as 512Mi, 4Gi or 1000000 (bytes)",
    LABEL_VALUE_PATTERN: f"must be letters, digits, '-', '_' and '.', {_ENDS}",
    f"({LABEL_KEY_PATTERN})|^$": "must be a label key: letters, digits, '-', '_' and '.', after an optional "
                                 "DNS prefix and '/' (such as example.com/team)",
    IMAGE_PATTERN: "must have no whitespace",
    CLASS_PATH_PATTERN: "must be an import path, package.module:Class",
    WRAPPER_NAME_PATTERN: "must be an import path such as gymnasium.wrappers:ClipAction",
    POLICY_NAME_PATTERN: f"must be lowercase letters, digits, '-' and '_', {_ENDS}",
    r"^[-._a-zA-Z0-9]+$": "must be letters, digits, '-', '.' and '_'",
}

_UNION_MEMBERS = ("int", "str", "float", "bool", "constrained-int", "constrained-str", "constrained-float")


def _short(name: str, limit: int = 64) -> str:
    """A field name as an error shows it: a 1 MB key is not echoed back."""
    return name if len(name) <= limit else f"{name[:limit]}...({len(name)} characters)"


def _pydantic_errors(exc: ValidationError, root: type[BaseModel], prefix: str) -> list[FieldError]:
    by_path: dict[str, tuple[str, dict[str, Any]]] = {}
    for err in exc.errors():
        # A union (int | str) reports once per member: keep the member that matches the input's type.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in _UNION_MEMBERS))
        parts = [prefix, *(f"[{p}]" if isinstance(p, int) else _short(str(p)) for p in loc)]
        path = ".".join(p for p in parts if p).replace(".[", "[")
        previous = by_path.get(path)
        if previous is not None and not (
            isinstance(err.get("input"), str) and err["type"].startswith("string_")
        ):
            continue
        by_path[path] = (err["type"], {**err, "loc": loc})
    errors = []
    for path, (kind, details) in by_path.items():
        loc = details["loc"]
        if kind == "extra_forbidden":
            parent = _resolve_model(root, loc[:-1])
            hint = _unknown_field_hint(str(loc[-1]), parent) if parent else ""
            message = f"unknown field{hint}"
        else:
            message = _message(kind, details)
        errors.append(FieldError(path, message))
    return errors


def _message(kind: str, details: dict[str, Any]) -> str:
    """A pydantic error in words: with the value given where its type or form is wrong."""
    value = details.get("input")
    if kind == "string_pattern_mismatch":
        return _pattern_message(str((details.get("ctx") or {}).get("pattern", "")), value)
    if kind in ("int_type", "int_from_float") and isinstance(value, float):
        if math.isfinite(value) and value.is_integer():  # 1e5 or 4.0: YAML made it a float
            return (f"must be a whole number written without a decimal point or exponent, got {value!r} "
                    f"(write {int(value)})")
        return f"must be a whole number, got {value!r}"
    message = _MESSAGES[kind](details.get("ctx") or {}) if kind in _MESSAGES else str(details["msg"])
    return f"{message}, got {_shown(value)}" if kind in _TYPE_ERRORS else message


def _pattern_message(pattern: str, value: Any) -> str:
    if pattern == STORAGE_URI_PATTERN and isinstance(value, str):
        problem = storage_uri_problem(value, plain_path=False)
        return problem or f"must be {STORAGE_ACCEPTED}, got {_shown(value)}"
    words = _PATTERN_WORDS.get(pattern, f"must match the pattern {pattern}")
    return f"{words}, got {_shown(value)}"


def _shown(value: Any) -> str:
    """A value as an error quotes it: as YAML writes it, a string quoted (saying so where it looks like a
    number, which quotes in the YAML make a string), a long one cut short."""
    if isinstance(value, str):
        quoted = repr(_short(value))
        return f"the string {quoted}" if _looks_like_number(value) else quoted
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return _short(repr(value))


def _looks_like_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def hyperparams_for(experiment: RLExperiment) -> CommonParams:
    """The algorithm's hyperparameters from `spec.config`, validated (raises ManifestError)."""
    params_cls = REGISTRY[experiment.spec.algorithm].hyperparams
    errors = config_errors(experiment.spec.algorithm, experiment.spec.config, "spec.config")
    if errors:
        raise ManifestError(errors)
    return validate_manifest_model(params_cls, experiment.spec.config)


def config_errors(algorithm: str, config: Any, path: str) -> list[FieldError]:
    """What is wrong with `config` as the hyperparameters of `algorithm`, each error named under `path`."""
    params_cls = REGISTRY[algorithm].hyperparams
    try:
        validate_manifest_model(params_cls, config)
    except ValidationError as exc:
        return with_hyperparameter_hints(_pydantic_errors(exc, params_cls, path), algorithm, path)
    return []


def with_hyperparameter_hints(errors: list[FieldError], algorithm: str, path: str) -> list[FieldError]:
    """`errors` of the hyperparameters under `path`, an unknown key that is another algorithm's hyperparameter
    (or one `algorithm` replaces) said so: a bare "unknown field" leaves the user to guess."""
    hinted = []
    for error in errors:
        key = error.path.removeprefix(f"{path}.")
        why = unknown_hyperparameter(key, algorithm) if (
            error.message.startswith("unknown field") and key != error.path and "." not in key) else None
        hinted.append(FieldError(error.path, why) if why else error)
    return hinted


def multi_agent_errors(experiment: RLExperiment) -> list[FieldError]:
    """spec.multiAgent as the manifest alone shows it: unique names, policies that exist, each policy's config."""
    multi = experiment.spec.multi_agent
    if multi is None:
        return []
    errors = [FieldError(path, message) for path, message in policy_errors(experiment)]
    named = {error.path.rsplit(".config.", 1)[0] for error in errors if ".config." in error.path}
    params_cls = REGISTRY[experiment.spec.algorithm].hyperparams
    for index, policy in enumerate(multi.policies):
        path = f"spec.multiAgent.policies[{index}]"
        if path in named:
            continue
        try:
            policy_params(experiment, policy)
        except ValidationError as exc:
            errors.extend(with_hyperparameter_hints(_pydantic_errors(exc, params_cls, f"{path}.config"),
                                                    experiment.spec.algorithm, f"{path}.config"))
    return errors


def _params_or_none(experiment: RLExperiment) -> CommonParams | None:
    """The validated hyperparameters, or None where they are invalid (the hyperparameter check reports that)."""
    try:
        return hyperparams_for(experiment)
    except ManifestError:
        return None


def cross_field_errors(experiment: RLExperiment) -> list[FieldError]:
    """What no schema can say: combinations of fields that cannot work together."""
    spec = experiment.spec
    entry = REGISTRY[spec.algorithm]
    errors: list[FieldError] = []
    shards = entry.shard_count(spec.rollouts.workers, spec.replay.shards)
    if entry.replay == "shards" and shards < 1:
        errors.append(FieldError("spec.replay.shards", f"{spec.algorithm} needs at least 1 replay shard"))
    if entry.replay == "shards" and spec.rollouts.workers < 1:
        errors.append(FieldError("spec.rollouts.workers", f"{spec.algorithm} samples only on rollout worker "
                                 "actors, which feed its replay shards: set it >= 1"))
    asked = spec.replay.shards
    if entry.replay == "local" and asked is not None and asked > 1:
        errors.append(FieldError("spec.replay.shards", f"{spec.algorithm} keeps one replay buffer in the learner: "
                                 "leave it unset or 1 (apex-dqn and sac spread replay over shards)"))
    if entry.replay == "local-or-shards" and asked is not None and asked >= 1 and spec.rollouts.workers < 1:
        errors.append(FieldError("spec.replay.shards", "replay shards are fed by rollout workers: set "
                                 "spec.rollouts.workers >= 1, or leave shards unset for one buffer in the learner"))
    if spec.rollouts.envs_per_worker % spec.rollouts.env_groups:
        errors.append(FieldError("spec.rollouts.envGroups", f"{spec.rollouts.env_groups} groups do not split "
                                 f"spec.rollouts.envsPerWorker ({spec.rollouts.envs_per_worker}) evenly"))
    stop = spec.stop
    criteria = (stop.timesteps, stop.episode_return_mean, stop.time_seconds, stop.iterations, stop.evaluation_return_mean)
    if all(value is None for value in criteria):
        errors.append(FieldError(
            "spec.stop", "set at least one of timesteps, episodeReturnMean, timeSeconds, iterations, evaluationReturnMean"
        ))
    if spec.evaluation is None:
        if stop.evaluation_return_mean is not None:
            errors.append(FieldError("spec.stop.evaluationReturnMean", "needs spec.evaluation"))
        if spec.checkpoint.keep_best:
            errors.append(FieldError("spec.checkpoint.keepBest", "needs spec.evaluation"))
    if entry.off_policy and spec.replay.capacity < max(shards, spec.replay.shards or 0):
        errors.append(FieldError("spec.replay.capacity", "must be at least spec.replay.shards"))
    if not may_name_multi_agent_env(spec.env.id):
        errors += minibatch_errors(experiment)
    return errors


def _names(model: type[BaseModel], prefix: str = "") -> tuple[str, ...]:
    return tuple(f.alias or n for n, f in model.model_fields.items() if n.startswith(prefix))


SHARD_SETTINGS = _names(ShardReplayParams)  # read only on the replay-shard topology
PRIORITY_SETTINGS = _names(DQNParams, "priority_")  # read only by a prioritized replay
NO_REPLAY = "has no effect: {algorithm} learns on-policy and keeps no replay (spec.replay is for {replayed})"
NO_SHARDS = ("has no effect: {algorithm} keeps one replay buffer in the learner here, and this is a setting "
             "of replay shards (spec.replay.shards >= 1 with spec.rollouts.workers >= 1)")
UNIFORM = ("has no effect: spec.replay.prioritized is false (in the manifest, or in the task-kind "
           "defaults where it leaves it unset), so replay is sampled uniformly; set "
           "spec.replay.prioritized: true to use it")


def _changed(model: BaseModel) -> list[str]:
    """The fields of `model` its document sets to other than their default (a full dump of the model, as
    kuberl stores a run's spec, sets every field to its default)."""
    fields = type(model).model_fields
    return [info.alias or name for name, info in fields.items() if name in model.model_fields_set
            and getattr(model, name) != info.get_default(call_default_factory=True, validated_data={})]


def unread_setting_errors(experiment: RLExperiment) -> list[FieldError]:
    """Settings the manifest writes that its run never reads, each named with why: a value that cannot take
    effect is a mistake the user would otherwise never learn of. Only what the manifest sets, never a
    default."""
    spec = experiment.spec
    entry = REGISTRY[spec.algorithm]
    errors: list[FieldError] = []
    if not entry.off_policy:
        replayed = listed([name for name, other in REGISTRY.items() if other.off_policy])
        why = NO_REPLAY.format(algorithm=spec.algorithm, replayed=replayed)
        errors += [FieldError(f"spec.replay.{name}", why) for name in _changed(spec.replay)]
    if entry.replay == "local-or-shards" and not learner_actor(experiment):
        why = NO_SHARDS.format(algorithm=spec.algorithm)
        errors += [FieldError(f"spec.config.{key}", why) for key in SHARD_SETTINGS if key in spec.config]
    if entry.off_policy and not spec.replay.prioritized:
        errors += [FieldError(f"spec.config.{key}", UNIFORM)
                   for key in PRIORITY_SETTINGS if key in spec.config]
    return errors


def may_name_multi_agent_env(env_id: str) -> bool:
    """The id's form is one a PettingZoo env may have ("package:module" or "package.module:factory": Python names
    either side of the colon, the trainer's "class" form), which only importing it tells apart from a gymnasium.Env
    class; a Gymnasium id is not."""
    module, colon, name = env_id.partition(":")
    return bool(colon) and PYTHON_NAME.match(module) is not None and PYTHON_NAME.match(name) is not None


def minibatch_errors(experiment: RLExperiment) -> list[FieldError]:
    """PPO's minibatch larger than its train batch, for a single-agent env (a multi-agent policy's batch also
    counts its agents, which only the env knows): the API checks it where the id says so, the trainer's env
    checks where it takes the env to know."""
    spec, params = experiment.spec, _params_or_none(experiment)
    if spec.multi_agent is not None or not isinstance(params, PPOParams) or (
            "minibatch_size" not in params.model_fields_set):
        return []
    batch = spec.rollouts.envs_per_worker * spec.rollouts.fragment_length * max(1, spec.rollouts.workers)
    if params.minibatch_size <= batch:
        return []
    return [FieldError("spec.config.minibatchSize",
                       f"must be <= the train batch ({batch} = envsPerWorker x fragmentLength x max(1, workers))")]


MAIN_CONTAINERS = {"head": "head", "workers": "worker"}  # the container names pod.py gives


def pod_template_errors(experiment: RLExperiment) -> list[FieldError]:
    """spec.head.template and spec.workers.template: the allowed fields of the Kubernetes schema, and
    nothing the operator owns or that would break the pods' security guarantees."""
    spec = experiment.spec
    storage_secret = spec.storage.secret_ref is not None
    errors: list[FieldError] = []
    for role, pod in (("head", spec.head), ("workers", spec.workers)):
        if pod.template is not None:
            errors += [FieldError(path, message) for path, message in
                       template_errors(pod.template, f"spec.{role}.template", role, MAIN_CONTAINERS[role],
                                       storage_secret=storage_secret)]
    return errors


def learner_actor(experiment: RLExperiment) -> bool:
    """Whether the learner runs as a Ray actor, which Ray may place on any pod (apex-dqn, sac with replay
    shards); every other learner trains in the trainer's process, on the head pod."""
    spec = experiment.spec
    return REGISTRY[spec.algorithm].placement(spec.rollouts.workers, spec.replay.shards) == "shards"


def learner_gpu_errors(experiment: RLExperiment) -> list[FieldError]:
    """spec.learner.gpus against the pods that can hold the learner: the head, or for a learner actor any."""
    spec = experiment.spec
    asked, head = spec.learner.gpus, spec.head.gpus
    if learner_actor(experiment):
        if asked > max(head, spec.workers.gpus if spec.workers.replicas else 0):
            return [FieldError("spec.learner.gpus", f"asks for {asked} GPU but no pod has one "
                               f"(spec.head.gpus={head}, spec.workers.gpus={spec.workers.gpus} on "
                               f"{spec.workers.replicas} worker pods)")]
        return []
    if asked > head:
        return [FieldError("spec.learner.gpus", f"asks for {asked} GPU, but spec.head.gpus is {head}: the "
                           f"{spec.algorithm} learner trains in the trainer's process on the head pod, so "
                           "the head must have the GPU (rollout workers sample on CPUs; spec.workers.gpus "
                           "serves only apex-dqn's and sharded sac's learner)")]
    return []


def cluster_errors(experiment: RLExperiment) -> list[FieldError]:
    """Checks that matter only when the experiment runs as pods."""
    spec = experiment.spec
    errors = learner_gpu_errors(experiment)
    if spec.storage.uri is None:
        errors.append(FieldError("spec.storage.uri", "required in a cluster (s3://bucket/prefix)"))
    elif spec.storage.uri.startswith("file://"):
        errors.append(FieldError("spec.storage.uri", "file:// storage is lost with the pod; use s3://bucket/prefix"))
    return errors


def unrepresentable_values(doc: Any, path: str = "") -> list[FieldError]:
    """Values the Kubernetes API cannot carry (JSON has no inf or nan; its integers are int64) and nesting
    deeper than MAX_NESTING, each named by its path: refused before they reach code that would fail on them."""
    errors: list[FieldError] = []
    stack: list[tuple[Any, str, int, str]] = [(doc, path, 0, path)]
    while stack:
        node, where, depth, field = stack.pop()
        field = where if depth <= 3 else field  # too deep a value is named by its field (spec.env.config)
        if isinstance(node, dict | list) and depth >= MAX_NESTING:
            errors.append(FieldError(field, f"nested more than {MAX_NESTING} levels deep"))
        elif isinstance(node, dict):
            stack.extend((value, f"{where}.{_short(str(key))}" if where else str(key), depth + 1, field)
                         for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, f"{where}[{i}]", depth + 1, field) for i, value in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool) and not INT64_RANGE[0] <= node <= INT64_RANGE[1]:
            errors.append(FieldError(where, "must fit in a 64-bit integer"))
        elif isinstance(node, float) and not math.isfinite(node):
            errors.append(FieldError(where, "must be a finite number"))
    return sorted(errors, key=lambda e: e.path)


def parse_resource(doc: dict[str, Any], model: type[ResourceT], kind: str, *, strict: bool = True) -> ResourceT:
    """A parsed manifest of `kind` as `model`, or ManifestError naming each field: the apiVersion and kind,
    values no Kubernetes object can hold, then the schema. strict=False ignores unknown top-level metadata
    (API-server objects)."""
    errors: list[FieldError] = []
    if doc.get("apiVersion") != API_VERSION:
        errors.append(FieldError("apiVersion", f"must be {API_VERSION!r}, got {doc.get('apiVersion')!r}"))
    if doc.get("kind") != kind:
        errors.append(FieldError("kind", f"must be {kind!r}, got {doc.get('kind')!r}"))
    if errors:
        raise ManifestError(errors)
    body = doc if strict else {k: doc[k] for k in ("apiVersion", "kind", "metadata", "spec", "status") if k in doc}
    errors = unrepresentable_values(body)
    if errors:
        raise ManifestError(errors)
    try:
        return validate_manifest_model(model, body)
    except ValidationError as exc:
        raise ManifestError(_pydantic_errors(exc, model, "")) from None


ENVELOPE_FIELDS = ("apiVersion", "kind")


def with_algorithm_hint(errors: list[FieldError], spec: Any, path: str) -> list[FieldError]:
    """`errors` of a spec (`path`: spec, spec.template) with an unknown algorithm answered by the one it most
    likely means ('PPO': 'ppo')."""
    given = spec.get("algorithm") if isinstance(spec, dict) else None
    if not isinstance(given, str):
        return errors
    match = given.lower() if given.lower() in REGISTRY else nearest(given.lower(), list(REGISTRY))
    if match is None:
        return errors
    return [FieldError(e.path, f"{e.message} (did you mean {match!r}?)")
            if e.path == f"{path}.algorithm" and "did you mean" not in e.message else e for e in errors]


def unparsed_config_errors(spec: Any, path: str, found: list[FieldError]) -> list[FieldError]:
    """The hyperparameter check of a spec (`path`: spec, spec.template) whose other fields failed the schema: it
    needs only the algorithm and the config, so its errors come in the same run as the others. Nothing where the
    schema already named the algorithm or the config, or the document is not of the kind asked for."""
    if not isinstance(spec, dict) or any(e.path in ENVELOPE_FIELDS for e in found):
        return []
    algorithm, config = spec.get("algorithm"), spec.get("config", {})
    if not isinstance(algorithm, str) or algorithm not in REGISTRY or not isinstance(config, dict):
        return []
    taken = (f"{path}.algorithm", f"{path}.config")
    if any(e.path == p or e.path.startswith(f"{p}.") for e in found for p in taken):
        return []
    return config_errors(algorithm, config, f"{path}.config")


def validate_document(doc: dict[str, Any], *, strict: bool = True, stored: bool = False) -> RLExperiment:
    """Validate a parsed manifest. strict=False ignores unknown top-level metadata (API-server objects).
    stored=True: a manifest kuberl stored with a run, whose settings that have no effect are not refused
    (earlier versions accepted them, and its checkpoints must stay loadable).
    Every independent error comes at once: the hyperparameters are checked even where the rest of the
    spec fails the schema; checks across fields need the fields valid and come once they are."""
    try:
        experiment = parse_resource(doc, RLExperiment, KIND, strict=strict)
    except ManifestError as exc:
        errors = with_algorithm_hint(exc.errors, doc.get("spec"), "spec")
        raise ManifestError(errors + unparsed_config_errors(doc.get("spec"), "spec", exc.errors)) from None
    errors = cross_field_errors(experiment) + pod_template_errors(experiment) + multi_agent_errors(experiment)
    if not stored:
        errors += unread_setting_errors(experiment)
    try:
        hyperparams_for(experiment)
    except ManifestError as exc:
        errors.extend(exc.errors)
    if errors:
        raise ManifestError(errors)
    return experiment


def load_manifest(text: str, *, overrides: list[str] | None = None, source: str = "manifest") -> RLExperiment:
    """Parse, override and validate manifest text; raises ManifestError."""
    return _overridden_and_validated(parse_yaml(text, source), overrides)


def _overridden_and_validated(doc: dict[str, Any], overrides: list[str] | None, *,
                              stored: bool = False) -> RLExperiment:
    if overrides:
        doc = apply_overrides(doc, overrides)
    return validate_document(doc, stored=stored)


def load_stored_manifest(text: str, *, overrides: list[str] | None = None, source: str = "manifest") -> RLExperiment:
    """A manifest kuberl stored with a run (a checkpoint's experiment.yaml), with any Python names its
    hyperparameters were once written in (num_epochs) read as the manifest's (numEpochs): earlier versions
    accepted both, and a checkpoint must stay loadable. A user's manifest goes through `load_manifest`, where a
    Python name is an error. Settings that have no effect, which earlier versions accepted, are not
    refused."""
    return _overridden_and_validated(in_manifest_names(parse_yaml(text, source)), overrides, stored=True)


def in_manifest_names(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with the Python names in spec.config and each policy's config renamed to the algorithm's manifest
    names, less the keys the algorithm never read (`not_read`); everything else, unknown keys included, as it
    was."""
    spec = doc.get("spec")
    if not isinstance(spec, dict) or spec.get("algorithm") not in REGISTRY:
        return doc
    params_cls = REGISTRY[spec["algorithm"]].hyperparams
    spec = {**spec, "config": _stored_config(spec["config"], params_cls)} if "config" in spec else dict(spec)
    multi_agent = spec.get("multiAgent")
    if isinstance(multi_agent, dict) and isinstance(multi_agent.get("policies"), list):
        policies = [{**policy, "config": _stored_config(policy.get("config"), params_cls)}
                    if isinstance(policy, dict) and "config" in policy else policy
                    for policy in multi_agent["policies"]]
        spec["multiAgent"] = {**multi_agent, "policies": policies}
    return {**doc, "spec": spec}


def _stored_config(config: Any, params_cls: type[CommonParams]) -> Any:
    renamed = _renamed_to_aliases(config, params_cls)
    if not isinstance(renamed, dict):
        return renamed
    return {key: value for key, value in renamed.items() if key not in params_cls.not_read}


def _renamed_to_aliases(data: Any, model: type[BaseModel]) -> Any:
    if not isinstance(data, dict):
        return data
    renamed: dict[str, Any] = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        name = field.alias if field is not None and field.alias else key
        if field is None:
            field = next((f for f in model.model_fields.values() if f.alias == key), None)
        nested = _model_in(field.annotation) if field is not None else None
        if nested is not None:
            value = ([_renamed_to_aliases(item, nested) for item in value] if isinstance(value, list)
                     else _renamed_to_aliases(value, nested))
        renamed[name] = value
    return renamed
