"""The AlgorithmConfig builder: names like the manifest, errors that name the field."""

from pathlib import Path

import pytest

from kuberl.api.field_errors import ManifestError
from kuberl.trainer.algorithms.config import AlgorithmConfig, algorithm_config_for
from kuberl.trainer.algorithms.ppo import PPO, PPOConfig
from kuberl.trainer.run.callbacks import Callbacks


def error_paths(config: AlgorithmConfig) -> dict[str, str]:
    with pytest.raises(ManifestError) as caught:
        config.validate()
    return {e.path: e.message for e in caught.value.errors}


def test_builder_sections_land_in_the_validated_experiment() -> None:
    config = (
        PPOConfig().environment("CartPole-v1", env_config={"sutton_barto_reward": False})
        .rollouts(workers=2, envs_per_worker=4, fragment_length=32)
        .training(lr=3e-4, num_epochs=3).resources(learner_gpus=0).debugging(seed=7)
    )
    spec = config.experiment.spec
    assert (spec.rollouts.workers, spec.rollouts.envs_per_worker, spec.rollouts.fragment_length) == (2, 4, 32)
    assert spec.env.config == {"sutton_barto_reward": False}
    assert spec.stop.iterations is None  # a Python run needs no stop criterion
    params = config.params
    assert (params.lr, params.num_epochs, params.seed) == (3e-4, 3, 7)


def test_negative_workers_names_the_field() -> None:
    errors = error_paths(PPOConfig().environment("CartPole-v1").rollouts(workers=-1))
    assert errors == {"spec.rollouts.workers": "must be >= 0"}


def test_unknown_hyperparameter_suggests_the_right_name() -> None:
    errors = error_paths(PPOConfig().environment("CartPole-v1").training(clip_parm=0.3))
    assert "spec.config.clipParm" in errors
    assert "clipParam" in errors["spec.config.clipParm"]


def test_bad_hyperparameter_value_names_the_field() -> None:
    errors = error_paths(PPOConfig().environment("CartPole-v1").training(gamma=1.5))
    assert errors == {"spec.config.gamma": "must be <= 1.0"}


def test_missing_env_and_unknown_env_are_named() -> None:
    assert "spec.env.id" in error_paths(PPOConfig())
    errors = error_paths(PPOConfig().environment("NoSuchEnv-v9"))
    assert list(errors) == ["spec.env.id"]
    assert "NoSuchEnv" in errors["spec.env.id"]


def test_minibatch_larger_than_the_batch_is_refused() -> None:
    errors = error_paths(
        PPOConfig().environment("CartPole-v1").rollouts(envs_per_worker=2, fragment_length=8).training(minibatch_size=64)
    )
    assert "spec.config.minibatchSize" in errors


def test_from_manifest_builds_the_algorithm_of_the_yaml(tmp_path: Path) -> None:
    manifest = tmp_path / "exp.yaml"
    manifest.write_text(
        "apiVersion: kuberl.io/v1alpha1\nkind: RLExperiment\nmetadata: {name: cp}\n"
        "spec:\n  algorithm: ppo\n  env: {id: CartPole-v1}\n  config: {lr: 0.002, minibatchSize: 64}\n"
        "  rollouts: {workers: 0, envsPerWorker: 2, fragmentLength: 32}\n  stop: {timesteps: 1000}\n"
    )
    config = AlgorithmConfig.from_manifest(manifest, overrides=["config.numEpochs=2"])
    assert isinstance(config, PPOConfig)
    assert config.params.lr == 0.002 and config.params.num_epochs == 2
    assert algorithm_config_for(config.experiment).params.minibatch_size == 64
    algo = config.build()
    try:
        assert isinstance(algo, PPO)
        result = algo.train()
        # 2 envs x 32 steps, less one reset step after each finished episode (CartPole's native vector env)
        assert 64 - result["episodes"] <= result["timesteps"] <= 64 and result["iteration"] == 1
    finally:
        algo.stop()


def test_the_base_class_alone_cannot_be_built() -> None:
    with pytest.raises(TypeError):
        AlgorithmConfig()


class CountingCallbacks(Callbacks):
    def __init__(self) -> None:
        self.results: list[int] = []
        self.episodes = 0

    def on_train_result(self, *, algorithm, result) -> None:
        self.results.append(result["iteration"])

    def on_episode_end(self, *, algorithm, episode) -> None:
        self.episodes += 1


def test_a_callbacks_class_from_python_gets_the_hooks() -> None:
    algo = (PPOConfig().environment("CartPole-v1").rollouts(envs_per_worker=2, fragment_length=32)
            .debugging(seed=1).callbacks(CountingCallbacks).build())
    try:
        algo.train()
        algo.train()
    finally:
        algo.stop()
    assert isinstance(algo.callbacks, CountingCallbacks)
    assert algo.callbacks.results == [1, 2] and algo.callbacks.episodes == algo.episodes > 0


def test_evaluation_stopping_and_checkpointing_sections_reach_the_manifest() -> None:
    config = (PPOConfig().environment("CartPole-v1")
              .evaluation(interval=5, episodes=3, workers=1, env_config={"max_episode_steps": 50},
                          video_every_evaluations=2)
              .stopping(evaluation_return_mean=450.0).checkpointing(keep=2, keep_best=True))
    spec = config.experiment.spec
    assert spec.evaluation.interval == 5 and spec.evaluation.episodes == 3 and spec.evaluation.workers == 1
    assert spec.evaluation.env_config == {"max_episode_steps": 50}
    assert spec.evaluation.video.every_evaluations == 2
    assert spec.stop.evaluation_return_mean == 450.0 and spec.checkpoint.keep_best and spec.checkpoint.keep == 2


def test_spec_callbacks_that_do_not_import_are_named() -> None:
    config = PPOConfig().environment("CartPole-v1")
    config.document["spec"]["callbacks"] = "no_such_pkg.hooks:Hooks"
    with pytest.raises(ManifestError) as caught:
        config.validate()
    assert [e.path for e in caught.value.errors] == ["spec.callbacks"]
