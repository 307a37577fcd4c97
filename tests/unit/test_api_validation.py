"""Manifest validation: each class of bad input names the field that is wrong."""

from __future__ import annotations

import re
import textwrap

import pytest

from kuberl.api.field_errors import ManifestError
from kuberl.api.hyperparams import PPOParams
from kuberl.api.storage_uri import storage_uri_problem
from kuberl.api.types import STORAGE_URI_PATTERN
from kuberl.api.validation import (
    cluster_errors,
    hyperparams_for,
    load_manifest,
    load_stored_manifest,
    validate_document,
)
from kuberl.api.yaml_text import apply_overrides, parse_yaml

GOOD = textwrap.dedent(
    """\
    apiVersion: kuberl.io/v1alpha1
    kind: RLExperiment
    metadata: {name: cartpole}
    spec:
      algorithm: ppo
      env: {id: CartPole-v1}
      stop: {timesteps: 10000}
    """
)


def errors_of(text: str, overrides: list[str] | None = None) -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifest(text, overrides=overrides)
    return [str(e) for e in info.value.errors]


def with_spec(**lines: str) -> str:
    """GOOD with extra spec lines (YAML flow values)."""
    extra = "".join(f"  {key}: {value}\n" for key, value in lines.items())
    return GOOD + extra


def test_good_manifest_resolves_defaults():
    experiment = load_manifest(GOOD)
    assert experiment.name == "cartpole"
    assert experiment.spec.rollouts.workers == 0
    assert experiment.spec.checkpoint.keep == 5
    assert isinstance(hyperparams_for(experiment), PPOParams)


def test_unknown_field_suggests_the_right_name():
    errors = errors_of(with_spec(rolouts="{workers: 2}"))
    assert errors == ["spec.rolouts: unknown field (did you mean 'rollouts'?)"]


def test_unknown_nested_field_names_the_full_path():
    errors = errors_of(with_spec(rollouts="{workers: 2, envsPerWorkr: 4}"))
    assert errors == ["spec.rollouts.envsPerWorkr: unknown field (did you mean 'envsPerWorker'?)"]


def test_negative_workers():
    assert errors_of(with_spec(rollouts="{workers: -1}")) == ["spec.rollouts.workers: must be >= 0"]


def test_wrong_type():
    assert errors_of(with_spec(rollouts="{workers: many}")) == [
        "spec.rollouts.workers: must be an integer, got 'many'"]


def test_unknown_algorithm():
    text = GOOD.replace("algorithm: ppo", "algorithm: a3c")
    [error] = errors_of(text)
    assert error.startswith("spec.algorithm: must be one of")
    assert "'apex-dqn'" in error


def test_missing_required_env():
    text = GOOD.replace("  env: {id: CartPole-v1}\n", "")
    assert errors_of(text) == ["spec.env: required field is missing"]


def test_wrong_api_version_and_kind():
    text = GOOD.replace("kuberl.io/v1alpha1", "kuberl.io/v1").replace("kind: RLExperiment", "kind: Experiment")
    errors = errors_of(text)
    assert errors[0].startswith("apiVersion: must be 'kuberl.io/v1alpha1'")
    assert errors[1].startswith("kind: must be 'RLExperiment'")


def test_bad_yaml_reports_the_line():
    text = GOOD.replace("algorithm: ppo", "algorithm: ppo: dqn")
    [error] = errors_of(text)
    assert "invalid YAML at line 5" in error


def test_several_documents_are_refused():
    [error] = errors_of(GOOD + "---\n" + GOOD)
    assert "exactly one YAML document, found 2" in error


def test_yaml_alias_bomb_is_refused_quickly():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefghi":
        prev = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    with pytest.raises(ManifestError) as info:
        parse_yaml(bomb)
    assert "YAML nodes" in str(info.value)


def test_huge_manifest_is_refused():
    with pytest.raises(ManifestError, match="larger than"):
        parse_yaml("a: " + "x" * 1_100_000)


def test_apex_needs_a_replay_shard():
    text = GOOD.replace("algorithm: ppo", "algorithm: apex-dqn") + "  rollouts: {workers: 2}\n"
    text += "  replay: {shards: 0}\n"
    assert errors_of(text) == ["spec.replay.shards: apex-dqn needs at least 1 replay shard"]


def test_apex_refuses_sampling_without_rollout_workers_naming_the_field():
    apex = GOOD.replace("algorithm: ppo", "algorithm: apex-dqn")
    assert errors_of(apex) == ["spec.rollouts.workers: apex-dqn samples only on rollout worker actors, which "
                               "feed its replay shards: set it >= 1"]
    assert errors_of(apex + "  rollouts: {workers: 0}\n")[0].startswith("spec.rollouts.workers: apex-dqn")
    assert load_manifest(apex + "  rollouts: {workers: 1}\n").spec.rollouts.workers == 1


def test_dqn_refuses_more_than_one_shard_and_takes_one_or_unset():
    dqn = GOOD.replace("algorithm: ppo", "algorithm: dqn")
    [error] = errors_of(dqn + "  replay: {shards: 2}\n")
    assert error.startswith("spec.replay.shards: dqn keeps one replay buffer in the learner")
    assert load_manifest(dqn + "  replay: {shards: 1}\n").spec.replay.shards == 1


def test_sac_refuses_shards_without_rollout_workers_to_feed_them():
    sac = GOOD.replace("algorithm: ppo", "algorithm: sac").replace("CartPole-v1", "Pendulum-v1")
    [error] = errors_of(sac + "  replay: {shards: 2}\n")
    assert error.startswith("spec.replay.shards: replay shards are fed by rollout workers")
    assert load_manifest(sac + "  replay: {shards: 2}\n  rollouts: {workers: 1}\n").spec.replay.shards == 2
    assert load_manifest(sac).spec.replay.shards is None


def test_env_groups_must_split_the_envs_evenly():
    [error] = errors_of(GOOD + "  rollouts: {envsPerWorker: 6, envGroups: 4}\n")
    assert error == "spec.rollouts.envGroups: 4 groups do not split spec.rollouts.envsPerWorker (6) evenly"
    assert load_manifest(GOOD + "  rollouts: {envsPerWorker: 6, envGroups: 3}\n").spec.rollouts.env_groups == 3
    assert load_manifest(GOOD).spec.rollouts.env_groups == 1


def test_stop_needs_a_criterion():
    text = GOOD.replace("  stop: {timesteps: 10000}\n", "")
    [error] = errors_of(text)
    assert error.startswith("spec.stop: set at least one of")


def test_unknown_hyperparameter_is_named_with_a_hint():
    assert errors_of(with_spec(config="{lrr: 0.1}")) == ["spec.config.lrr: unknown field (did you mean 'lr'?)"]


def test_hyperparameter_out_of_range():
    assert errors_of(with_spec(config="{gamma: 1.5}")) == ["spec.config.gamma: must be <= 1.0"]


def test_resource_quantities():
    assert errors_of(with_spec(head="{cpu: two}")) == [
        "spec.head.cpu: must be a number of CPUs such as 2, 0.5 or 500m, got 'two'"
    ]
    ok = load_manifest(with_spec(head="{cpu: 2, memory: 512Mi}"))
    assert ok.spec.head.cpu == 2 and ok.spec.head.memory == "512Mi"


def test_gpus_must_be_whole():
    assert errors_of(with_spec(learner="{gpus: 0.5}")) == [
        "spec.learner.gpus: must be a whole number, got 0.5"]


def test_storage_uri_scheme():
    [error] = errors_of(with_spec(storage="{uri: 'gs://bucket/x'}"))
    assert error == ("spec.storage.uri: unknown scheme 'gs' in 'gs://bucket/x' "
                     "(use s3://bucket/prefix or file:///path)")


@pytest.mark.parametrize(("uri", "message"), [
    ("/tmp/runs", "'/tmp/runs' is a plain path: write a URI, s3://bucket/prefix or file:///path"),
    ("s3://Bad_Bucket/x", "'Bad_Bucket' is not an S3 bucket name: 3-63 lowercase letters, digits, '.' "
                          "and '-', starting and ending with a letter or digit"),
    ("S3://bucket/x", "the scheme must be lowercase: s3://, got 'S3://bucket/x'"),
    ("s3:/bucket/x", "'s3:/bucket/x' needs '//' after 's3:' (s3://...)"),
])
def test_storage_uri_errors_say_what_is_accepted(uri, message):
    assert errors_of(with_spec(storage=f"{{uri: '{uri}'}}")) == [f"spec.storage.uri: {message}"]


@pytest.mark.parametrize("uri", [
    "s3://bucket", "s3://my.bucket-1/a/b", "file:///tmp/x", "file://rel", "s3://abc/", "s3://ab/x",
    "s3://-ab/x", "s3://", "file://", "S3://bucket", "gs://b/x", "s3:/b/x", "s3://b_b/x", "http://b/x", "file:/x",
    "s3://" + "a" * 64])
def test_the_storage_uri_words_agree_with_the_schema(uri):
    accepted = re.fullmatch(STORAGE_URI_PATTERN, uri) is not None
    assert (storage_uri_problem(uri, plain_path=False) is None) == accepted
    assert (storage_uri_problem(uri, plain_path=True) is None) == accepted  # a URI: as in spec.storage.uri


@pytest.mark.parametrize("path", ["runs", "./kuberl-runs", "/tmp/x", "~/runs", "../a b/c"])
def test_a_plain_path_is_a_storage_only_where_plain_paths_are_allowed(path):
    assert storage_uri_problem(path, plain_path=True) is None
    assert storage_uri_problem(path, plain_path=False) == (
        f"{path!r} is a plain path: write a URI, s3://bucket/prefix or file:///path")


def test_metadata_name_must_be_a_kubernetes_name():
    [error] = errors_of(GOOD.replace("name: cartpole", "name: Cart_Pole"))
    assert error == ("metadata.name: must be lowercase letters, digits, '-' and '.', starting and ending "
                     "with a letter or digit, got 'Cart_Pole'")


def test_an_endpoint_must_be_an_http_url():
    [error] = errors_of(with_spec(storage="{uri: 's3://bucket/x', endpoint: 'minio:9000'}"))
    assert error == ("spec.storage.endpoint: must be an http:// or https:// URL such as http://minio:9000, "
                     "got 'minio:9000'")


def test_no_error_shows_a_raw_pattern():
    errors = errors_of(GOOD.replace("name: cartpole", "name: A_B"), overrides=[
        "storage.uri=gs://b/x", "storage.endpoint=minio", "head.cpu=two", "head.memory=lots", "image=a b",
        "serviceAccountName=Bad_Name", "checkpoint.restoreFrom=./runs"])
    assert len(errors) == 8 and not any("pattern" in e or "^" in e for e in errors), errors


def test_minibatch_larger_than_batch():
    [error] = errors_of(with_spec(config="{minibatchSize: 100000}"))
    assert error.startswith("spec.config.minibatchSize: must be <= the train batch")


def test_overrides_reach_the_spec_and_parse_values():
    experiment = load_manifest(GOOD, overrides=["rollouts.workers=3", "config.lr=0.001", "spec.suspend=true"])
    assert experiment.spec.rollouts.workers == 3
    assert experiment.spec.config["lr"] == 0.001
    assert experiment.spec.suspend is True


def test_override_errors_name_the_field():
    assert errors_of(GOOD, overrides=["rollouts.workers=-2"]) == ["spec.rollouts.workers: must be >= 0"]
    with pytest.raises(ManifestError, match="expected key=value"):
        apply_overrides({}, ["rollouts.workers"])


def test_cluster_checks():
    experiment = load_manifest(with_spec(learner="{gpus: 1}"))
    errors = [str(e) for e in cluster_errors(experiment)]
    assert errors[0].startswith("spec.learner.gpus: asks for 1 GPU, but spec.head.gpus is 0")
    assert errors[1] == "spec.storage.uri: required in a cluster (s3://bucket/prefix)"
    ok = load_manifest(with_spec(learner="{gpus: 1}", head="{gpus: 1}", storage="{uri: 's3://bucket/runs'}"))
    assert cluster_errors(ok) == []


def test_more_than_one_learner_gpu_is_refused_naming_the_field():
    (error,) = errors_of(with_spec(learner="{gpus: 2}", head="{gpus: 2}"))
    assert error.startswith("spec.learner.gpus: is 2, but the learner trains on at most 1 GPU")
    assert "workers.gpus" not in error  # rollout workers sample on CPUs: GPUs there would sit idle


S3 = "{uri: 's3://bucket/runs'}"


@pytest.mark.parametrize("algorithm", ["ppo", "dqn", "impala", "appo", "sac"])
def test_a_learner_in_the_trainers_process_needs_the_gpu_on_the_head(algorithm: str):
    """Only apex-dqn's and sharded sac's learner is a Ray actor; every other trains on the head pod, where a
    GPU on the worker pods alone would leave it on the CPU."""
    text = with_spec(learner="{gpus: 1}", workers="{replicas: 1, gpus: 1}", storage=S3)
    experiment = load_manifest(text.replace("algorithm: ppo", f"algorithm: {algorithm}").replace(
        "CartPole-v1", "Pendulum-v1" if algorithm == "sac" else "CartPole-v1"))
    (error,) = [str(e) for e in cluster_errors(experiment)]
    assert error.startswith("spec.learner.gpus: asks for 1 GPU, but spec.head.gpus is 0: the "
                            f"{algorithm} learner trains in the trainer's process on the head pod")
    on_head = experiment.model_copy(update={"spec": experiment.spec.model_copy(
        update={"head": experiment.spec.head.model_copy(update={"gpus": 1})})})
    assert cluster_errors(on_head) == []


@pytest.mark.parametrize(("algorithm", "env", "extra"), [
    ("apex-dqn", "CartPole-v1", {}),
    ("sac", "Pendulum-v1", {"replay": "{shards: 1}"}),
])
def test_a_learner_actor_may_take_the_gpu_of_a_worker_pod(algorithm: str, env: str, extra: dict[str, str]):
    text = with_spec(learner="{gpus: 1}", rollouts="{workers: 2}", workers="{replicas: 1, gpus: 1}",
                     storage=S3, **extra)
    text = text.replace("algorithm: ppo", f"algorithm: {algorithm}").replace("CartPole-v1", env)
    assert cluster_errors(load_manifest(text)) == []
    (error,) = [str(e) for e in cluster_errors(load_manifest(text.replace("replicas: 1", "replicas: 0")))]
    assert error.startswith("spec.learner.gpus: asks for 1 GPU but no pod has one")


def test_pixel_fields_validate_with_paths():
    experiment = load_manifest(with_spec(learner="{gpus: 1, bf16: true}"),
                               overrides=["config.model={conv: [[16, 8, 4]], hidden: [64]}"])
    assert experiment.spec.learner.bf16 and experiment.spec.env.preprocessing == "none"
    errors = errors_of(GOOD, overrides=["env.preprocessing=deepmind", "env.wrappers=[{name: ClipAction}]",
                                        "config.model={conv: [[16, 8]], hidden: [64]}"])
    assert any(e.startswith("spec.env.preprocessing: must be one of") for e in errors), errors
    assert any(e.startswith("spec.env.wrappers[0].name: 'ClipAction' is not an import path") for e in errors)
    errors = errors_of(GOOD, overrides=["config.model={conv: [[16, 8]], hidden: [64]}"])
    assert errors == ["spec.config.model.conv[0]: must have at least 3 items"]


@pytest.mark.parametrize(("written", "value"), [
    ("3e-4", 3e-4), ("1e-06", 1e-6), ("1.0e5", 1e5), ("-2E+3", -2000.0), ("1e5", 1e5), (".5e1", 5.0)])
def test_exponent_numbers_are_numbers_as_yaml_1_2_and_kubectl_read_them(written, value):
    assert parse_yaml(f"x: {written}")["x"] == value
    assert apply_overrides({}, [f"config.lr={written}"])["spec"]["config"]["lr"] == value


@pytest.mark.parametrize("written", ["1e", "e5", "1e5x", "1_e5", "'3e-4'"])
def test_what_is_no_number_stays_a_string(written):
    assert isinstance(parse_yaml(f"x: {written}")["x"], str)


def test_hyperparameters_in_exponent_form_validate():
    experiment = load_manifest(with_spec(config="{lr: 3e-4}"), overrides=["config.gamma=9.9e-1"])
    assert experiment.spec.config == {"lr": 3e-4, "gamma": 0.99}
    dqn = load_manifest(GOOD.replace("algorithm: ppo", "algorithm: dqn") + "  config: {priorityEps: 1e-06}\n")
    assert dqn.spec.config["priorityEps"] == 1e-6


def test_a_number_where_an_integer_belongs_names_the_value():
    assert errors_of(GOOD.replace("timesteps: 10000", "timesteps: 1e5")) == [
        "spec.stop.timesteps: must be a whole number written without a decimal point or exponent, "
        "got 100000.0 (write 100000)"]
    assert errors_of(with_spec(config="{lr: '3e-4'}")) == [
        "spec.config.lr: must be a number, got the string '3e-4'"]


def _as(algorithm: str, env: str = "CartPole-v1", **lines: str) -> str:
    return with_spec(**lines).replace("algorithm: ppo", f"algorithm: {algorithm}").replace("CartPole-v1", env)


@pytest.mark.parametrize("algorithm", ["ppo", "impala", "appo"])
def test_replay_settings_of_an_on_policy_algorithm_are_refused(algorithm: str):
    errors = errors_of(_as(algorithm, replay="{shards: 8, capacity: 5, prioritized: false}"))
    why = (f"has no effect: {algorithm} learns on-policy and keeps no replay (spec.replay is for dqn, "
           "apex-dqn and sac)")
    assert errors == [f"spec.replay.{name}: {why}" for name in ("shards", "capacity", "prioritized")]


SHARD_ONLY = {"weightSyncInterval": 1000, "prefetch": 64, "maxReplayRatio": 0.001, "minIterationSeconds": 60}


def test_sac_settings_of_replay_shards_are_refused_with_one_buffer_in_the_learner():
    config = "{" + ", ".join(f"{key}: {value}" for key, value in SHARD_ONLY.items()) + "}"
    errors = errors_of(_as("sac", "Pendulum-v1", config=config))
    assert [e.split(":")[0] for e in errors] == [f"spec.config.{key}" for key in SHARD_ONLY]
    assert all("has no effect: sac keeps one replay buffer in the learner here" in e for e in errors)
    sharded = load_manifest(_as("sac", "Pendulum-v1", config=config, rollouts="{workers: 2}",
                                replay="{shards: 1}"))
    assert sharded.spec.config == SHARD_ONLY


@pytest.mark.parametrize("algorithm", ["dqn", "sac"])
def test_priority_settings_with_a_uniform_replay_are_refused(algorithm: str):
    env = "Pendulum-v1" if algorithm == "sac" else "CartPole-v1"
    config = "{priorityAlpha: 0.9, priorityBeta: 0.1, lr: 0.001}"
    errors = errors_of(_as(algorithm, env, replay="{prioritized: false}", config=config))
    assert [e.split(": has no effect: ")[0] for e in errors] == ["spec.config.priorityAlpha",
                                                                "spec.config.priorityBeta"]
    assert "spec.replay.prioritized is false" in errors[0]
    assert load_manifest(_as(algorithm, env, replay="{prioritized: true}", config=config))


def test_defaults_written_out_in_full_are_not_taken_for_settings():
    """A full dump of a spec (the operator's ConfigMap, a run's stored experiment.yaml) sets every field to
    its default: only a value the manifest changes can have been meant."""
    full = load_manifest(GOOD).to_manifest()
    assert full["spec"]["replay"] == {"capacity": 100000, "prioritized": True}
    assert validate_document(full).spec.replay.capacity == 100000


def test_a_stored_manifest_with_settings_of_no_effect_stays_loadable():
    """Earlier versions accepted them, and a checkpoint's experiment.yaml must stay readable."""
    config = "{epsilonEnd: 0.1, priorityAlpha: 0.5}"
    text = _as("apex-dqn", rollouts="{workers: 2}", config=config) + "  replay: {prioritized: false}\n"
    assert len(errors_of(text)) == 2
    assert load_stored_manifest(text).spec.config == {"priorityAlpha": 0.5}
    ppo = _as("ppo", replay="{capacity: 5}")
    assert load_stored_manifest(ppo).spec.replay.capacity == 5


def test_apex_refuses_dqns_final_epsilon_and_says_what_to_set():
    (error,) = errors_of(_as("apex-dqn", rollouts="{workers: 2}", config="{epsilonEnd: 0.9}"))
    assert error == ("spec.config.epsilonEnd: 'epsilonEnd' is not a hyperparameter of apex-dqn: each worker "
                     "explores with its own final epsilon, workerEpsilonBase ** (1 + workerEpsilonExponent * "
                     "i/(N-1)): set workerEpsilonBase or workerEpsilonExponent instead")


@pytest.mark.parametrize(("algorithm", "key", "whose"), [
    ("dqn", "clipParam", "ppo and appo's"),
    ("ppo", "learningStarts", "dqn, apex-dqn and sac's"),
    ("dqn", "numEpochs", "ppo's"),
])
def test_a_hyperparameter_of_another_algorithm_names_whose_it_is(algorithm: str, key: str, whose: str):
    (error,) = errors_of(_as(algorithm, config=f"{{{key}: 1}}"))
    assert error == (f"spec.config.{key}: {key!r} is not a hyperparameter of {algorithm} "
                     f"(it is one of {whose})")
    (error,) = errors_of(_as(algorithm, config="{lrr: 1}"))
    assert error == "spec.config.lrr: unknown field (did you mean 'lr'?)"


@pytest.mark.parametrize(("given", "meant"),
                         [("PPO", "ppo"), ("Apex-DQN", "apex-dqn"), ("apex_dqn", "apex-dqn")])
def test_a_wrongly_written_algorithm_suggests_the_right_one(given: str, meant: str):
    (error,) = errors_of(_as(given))
    assert error.startswith("spec.algorithm: must be one of") and error.endswith(f"(did you mean {meant!r}?)")


def test_what_kuberl_writes_it_reads_back_the_same_even_strings_that_look_like_numbers():
    """load_yaml reads `1e5` as a number (as kubectl does); dump_yaml quotes a string of that form, so a run's
    experiment.yaml and the operator's ConfigMap give back the strings they were given."""
    from kuberl.api.yaml_text import dump_yaml, load_yaml

    document = {"metadata": {"name": "1e5", "labels": {"run": "3e-4"}}, "spec": {"config": {"lr": 3e-4},
                                                                                 "env": {"config": {"mode": "1.0e5"}}}}
    assert load_yaml(dump_yaml(document, sort_keys=False)) == document
