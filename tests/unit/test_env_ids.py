"""spec.env.id as Gymnasium means it, env.preprocessing and env.wrappers: what each form builds, and the
errors (naming the field and the package to install) when it cannot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from kuberl.api.validation import validate_document
from kuberl.trainer.run.checks import env_errors
from kuberl.trainer.sampling.env_ids import EnvNotFound, parse_env_id
from kuberl.trainer.sampling.envs import EnvSettings, env_spaces, make_env, make_vector_env
from kuberl.trainer.sampling.wrappers import WrapperSettings

ROOT = Path(__file__).resolve().parents[2]


def experiment(env: dict, algorithm: str = "ppo", config: dict | None = None):
    return validate_document({
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "x"},
        "spec": {"algorithm": algorithm, "env": env, "config": config or {}, "stop": {"iterations": 1}},
    })


@pytest.mark.parametrize(("env_id", "kind", "module", "name"), [
    ("CartPole-v1", "gymnasium", None, "CartPole-v1"),
    ("ALE/Pong-v5", "gymnasium", "ale_py", "ALE/Pong-v5"),
    ("ale_py:ALE/Pong-v5", "gymnasium", "ale_py", "ALE/Pong-v5"),
    ("kuberl_testing.pixel_env:PixelQuadrant-v0", "gymnasium", "kuberl_testing.pixel_env", "PixelQuadrant-v0"),
    ("my_pkg.envs:Corridor", "class", "my_pkg.envs", "Corridor"),
    ("my_pkg:envs.Corridor", "class", "my_pkg", "envs.Corridor"),
])
def test_the_three_forms_are_told_apart_after_the_colon(env_id, kind, module, name):
    parsed = parse_env_id(env_id)
    assert (parsed.kind, parsed.module, parsed.name) == (kind, module, name)


@pytest.mark.parametrize("env_id", ["bad module:Thing", ":ALE/Pong-v5", "pkg:"])
def test_malformed_colon_forms_are_refused(env_id):
    with pytest.raises(EnvNotFound):
        parse_env_id(env_id)


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ale_py:ALE/Pong-v5"])
def test_ale_ids_build_without_importing_anything_first(env_id):
    spaces = env_spaces(env_id)
    assert spaces.observation_space.shape == (210, 160, 3) and spaces.observation_space.dtype == np.uint8
    assert env_errors(experiment({"id": env_id})) == []


def test_ale_ids_work_in_a_fresh_interpreter_that_never_imported_ale_py():
    code = ("from kuberl.trainer.sampling.envs import env_spaces; import sys; "
            "assert 'ale_py' not in sys.modules; print(env_spaces('ALE/Breakout-v5').action_space)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Discrete(4)" in out.stdout


def test_a_missing_registering_package_is_named():
    (error,) = env_errors(experiment({"id": "no_such_dist:Thing-v0"}))
    assert error.path == "spec.env.id"
    assert "install no_such_dist" in error.message


def test_a_missing_dependency_of_a_gymnasium_env_names_the_distribution():
    code = ("import sys; sys.modules['mujoco'] = None\n"
            "from kuberl.trainer.run.checks import env_errors\n"
            "from kuberl.api.validation import validate_document\n"
            "e = validate_document({'apiVersion': 'kuberl.io/v1alpha1', 'kind': 'RLExperiment', 'metadata': {'name': 'x'},"
            " 'spec': {'algorithm': 'ppo', 'env': {'id': 'HalfCheetah-v5'}, 'stop': {'iterations': 1}}})\n"
            "print(env_errors(e))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "spec.env.id" in out.stdout and "mujoco" in out.stdout


def test_halfcheetah_builds_with_the_mujoco_extra():
    spaces = env_spaces("HalfCheetah-v5")
    assert spaces.observation_space.shape == (17,) and spaces.action_space.shape == (6,)


def test_atari_preset_gives_stacked_uint8_frames_and_clipped_training_rewards():
    settings = EnvSettings("ALE/Breakout-v5", preprocessing="atari")
    env = make_env(settings)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    spec_kwargs = env.unwrapped.spec.kwargs
    assert spec_kwargs["frameskip"] == 1 and spec_kwargs["repeat_action_probability"] == 0.25  # sticky, as v5 sets
    names = []
    wrapped: gym.Env = env
    while isinstance(wrapped, gym.Wrapper):
        names.append(type(wrapped).__name__)
        wrapped = wrapped.env
    assert names[:5] == ["FrameStackObservation", "ClipReward", "FireReset", "EpisodicLife", "GameScore"]
    assert "AtariPreprocessing" in names
    evaluation = make_env(settings, training=False)
    names = []
    wrapped = evaluation
    while isinstance(wrapped, gym.Wrapper):
        names.append(type(wrapped).__name__)
        wrapped = wrapped.env
    assert "EpisodicLife" not in names and "ClipReward" not in names


def test_a_training_episode_is_a_whole_game_with_its_unclipped_score():
    """Breakout (5 lives, bricks worth 1, 4 and 7): the learner sees a terminal per lost life and clipped
    rewards, the worker records one episode per game whose return is the game's unclipped score."""
    from kuberl.trainer.sampling.rollout_worker import RolloutWorker, WorkerConfig

    class Random:
        def __init__(self, *args):
            self.rng = np.random.default_rng(0)

        def compute_actions(self, obs, explore=True):
            return self.rng.integers(0, 4, len(obs)), {}

        def set_weights(self, weights):
            pass

    worker = RolloutWorker(WorkerConfig("ALE/Breakout-v5", num_envs=1, fragment_length=1, seed=1,
                                        preprocessing="atari"), Random)
    terminals, clipped, episodes = 0, 0.0, []
    while not episodes:
        batch = worker.sample()
        assert batch.data["obs"].dtype == np.uint8 and batch.data["obs"].shape[2:] == (4, 84, 84)
        assert set(np.unique(batch.data["rewards"])) <= {0.0, 1.0}
        terminals += int(batch.data["terminateds"].sum())
        clipped += float(batch.data["rewards"].sum())
        episodes += batch.episodes
    assert terminals == 5, "one terminal per life for the learner"
    (game,) = episodes
    assert game["return"] >= clipped > 0 or game["return"] == clipped == 0
    assert game["length"] > 100


def test_wrappers_apply_in_order_with_kwargs():
    settings = EnvSettings("CartPole-v1", wrappers=(WrapperSettings("gymnasium.wrappers.TimeLimit",
                                                                    {"max_episode_steps": 5}),))
    env = make_env(settings)
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(0 if steps % 2 else 1)
        steps += 1
        done = terminated or truncated
    assert steps <= 5
    vector = make_vector_env(settings, num_envs=2)
    assert isinstance(vector, gym.vector.SyncVectorEnv)  # wrapped envs never take the native vector path


def test_env_field_errors_name_their_paths():
    (error,) = env_errors(experiment({"id": "CartPole-v1", "preprocessing": "atari"}))
    assert error.path == "spec.env.preprocessing" and "ALE" in error.message
    (error,) = env_errors(experiment({"id": "ALE/Pong-v5", "preprocessing": "atari", "config": {"frameskip": 4}}))
    assert error.path == "spec.env.config.frameskip"
    (error,) = env_errors(experiment({"id": "CartPole-v1", "wrappers": [{"name": "gymnasium.wrappers.Nope"}]}))
    assert error.path == "spec.env.wrappers[0].name"
    (error,) = env_errors(experiment({"id": "CartPole-v1", "wrappers": [
        {"name": "gymnasium.wrappers.RecordEpisodeStatistics"}, {"name": "gymnasium.wrappers.TimeLimit",
                                                                 "kwargs": {"steps": 3}}]}))
    assert error.path == "spec.env.wrappers[1].kwargs"


def test_image_settings_are_checked_against_the_image():
    pixel = {"id": "kuberl_testing.pixel_env:PixelQuadrant-v0"}
    (error,) = env_errors(experiment(pixel))  # the Nature stack's 8x8 kernel does not fit 16x16 twice
    assert error.path == "spec.config.model.conv" and "kernel" in error.message
    assert env_errors(experiment(pixel, config={"model": {"conv": [[8, 3, 2]], "hidden": [16]}})) == []
    (error,) = env_errors(experiment(pixel, config={"model": {"conv": [[8, 3, 2]]}, "observationFilter": "mean_std"}))
    assert error.path == "spec.config.observationFilter"


def test_the_operator_never_imports_gymnasium_or_env_packages():
    code = "import sys, kuberl.operator.main, kuberl.api.validation; print(sorted({'gymnasium', 'ale_py'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
