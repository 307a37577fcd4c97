"""Manifest validation: each class of bad input names the field that is wrong."""

from __future__ import annotations

import textwrap

import pytest

from kuberl.api.hyperparams import PPOParams
from kuberl.api.validation import (
    ManifestError,
    apply_overrides,
    cluster_errors,
    hyperparams_for,
    load_manifest,
    parse_yaml,
)

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
    assert errors_of(with_spec(rollouts="{workers: many}")) == ["spec.rollouts.workers: must be an integer"]


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
    text = GOOD.replace("algorithm: ppo", "algorithm: apex-dqn") + "  replay: {shards: 0}\n"
    assert errors_of(text) == ["spec.replay.shards: apex-dqn needs at least 1 replay shard"]


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
        "spec.head.cpu: must match the pattern ^[0-9]+(\\.[0-9]+)?m?$"
    ]
    ok = load_manifest(with_spec(head="{cpu: 2, memory: 512Mi}"))
    assert ok.spec.head.cpu == 2 and ok.spec.head.memory == "512Mi"


def test_gpus_must_be_whole():
    assert errors_of(with_spec(learner="{gpus: 0.5}")) == ["spec.learner.gpus: must be a whole number"]


def test_storage_uri_scheme():
    [error] = errors_of(with_spec(storage="{uri: 'gs://bucket/x'}"))
    assert error.startswith("spec.storage.uri: must match the pattern")


def test_metadata_name_must_be_a_kubernetes_name():
    [error] = errors_of(GOOD.replace("name: cartpole", "name: Cart_Pole"))
    assert error.startswith("metadata.name: must match the pattern")


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
    assert errors[0].startswith("spec.learner.gpus: asks for 1 GPUs but no pod has that many")
    assert errors[1] == "spec.storage.uri: required in a cluster (s3://bucket/prefix)"
    ok = load_manifest(with_spec(learner="{gpus: 1}", head="{gpus: 1}", storage="{uri: 's3://bucket/runs'}"))
    assert cluster_errors(ok) == []


def test_more_than_one_learner_gpu_is_refused_naming_the_field():
    (error,) = errors_of(with_spec(learner="{gpus: 2}", head="{gpus: 2}"))
    assert error.startswith("spec.learner.gpus: is 2, but the learner trains on at most 1 GPU")


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
