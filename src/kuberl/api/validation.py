"""Turn manifest text into a validated RLExperiment, or into errors that name fields.

Everything here is pure and light (pyyaml, pydantic): the operator and the CLI share it. The YAML is read
by `kuberl.api.yaml_text`, and errors are worded by `kuberl.api.field_errors`. Checks that need the
trainer's libraries (does the env exist, does the algorithm support its action space) live in
`kuberl.trainer.run.checks`; both read the algorithm registry, `kuberl.api.algorithms`.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kuberl.api.algorithms import REGISTRY, listed, unknown_hyperparameter
from kuberl.api.base import at_default, manifest_names
from kuberl.api.field_errors import (
    FieldError,
    ManifestError,
    model_in,
    nearest,
    pydantic_errors,
    shortened,
    validate_manifest_model,
)
from kuberl.api.hyperparams import CommonParams, DQNParams, PPOParams, ShardReplayParams
from kuberl.api.multiagent import policy_errors, policy_params
from kuberl.api.podtemplate import template_errors
from kuberl.api.types import API_VERSION, KIND, PYTHON_NAME, RLExperiment
from kuberl.api.yaml_text import apply_overrides, parse_yaml

ResourceT = TypeVar("ResourceT", bound=BaseModel)

MAX_NESTING = 64  # far deeper than any spec; serializers and parsers with recursion limits stay safe
INT64_RANGE = (-(2**63), 2**63 - 1)  # the Kubernetes API's integers


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
        return with_hyperparameter_hints(pydantic_errors(exc, params_cls, path), algorithm, path)
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
            errors.extend(with_hyperparameter_hints(pydantic_errors(exc, params_cls, f"{path}.config"),
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


SHARD_SETTINGS = tuple(manifest_names(ShardReplayParams))  # read only on the replay-shard topology
PRIORITY_SETTINGS = tuple(manifest_names(DQNParams, "priority_"))  # read only by a prioritized replay
NO_REPLAY = "has no effect: {algorithm} learns on-policy and keeps no replay (spec.replay is for {replayed})"
NO_SHARDS = ("has no effect: {algorithm} keeps one replay buffer in the learner here, and this is a setting "
             "of replay shards (spec.replay.shards >= 1 with spec.rollouts.workers >= 1)")
UNIFORM = ("has no effect: spec.replay.prioritized is false (in the manifest, or in the task-kind "
           "defaults where it leaves it unset), so replay is sampled uniformly; set "
           "spec.replay.prioritized: true to use it")


def _changed(model: BaseModel) -> list[str]:
    """The fields of `model` its document sets to other than their default (a full dump of the model, as
    kuberl stores a run's spec, sets every field to its default)."""
    return [info.alias or name for name, info in type(model).model_fields.items()
            if name in model.model_fields_set and not at_default(model, name)]


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
            stack.extend((value, f"{where}.{shortened(str(key))}" if where else str(key), depth + 1, field)
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
        raise ManifestError(pydantic_errors(exc, model, "")) from None


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
        nested = model_in(field.annotation) if field is not None else None
        if nested is not None:
            value = ([_renamed_to_aliases(item, nested) for item in value] if isinstance(value, list)
                     else _renamed_to_aliases(value, nested))
        renamed[name] = value
    return renamed
