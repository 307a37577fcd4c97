"""checks.env_errors: unknown ids, bad module:Class paths, action spaces an algorithm cannot use."""

from pathlib import Path

import pytest

from kuberl.api.validation import validate_document
from kuberl.trainer.run.checks import env_errors
from kuberl.trainer.sampling.envs import make_vector_env
from kuberl_testing.user_modules import importable_module

CUSTOM_ENV = '''
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right `length` cells to finish; the reward is -1 a step."""

    def __init__(self, length=3):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, float(length), shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        done = self.position >= self.length
        return np.array([self.position], dtype=np.float32), -1.0, done, False, {}
'''


def experiment(algorithm: str, env_id: str, env_config: dict | None = None):
    workers = 1 if algorithm == "apex-dqn" else 0  # apex-dqn samples only on rollout workers
    return validate_document({
        "apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "x"},
        "spec": {"algorithm": algorithm, "env": {"id": env_id, "config": env_config or {}},
                 "stop": {"iterations": 1}, "rollouts": {"workers": workers}},
    })


@pytest.fixture
def custom_env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    yield from importable_module(tmp_path, monkeypatch, "corridor_env", CUSTOM_ENV)


def test_known_envs_pass() -> None:
    assert env_errors(experiment("ppo", "CartPole-v1")) == []
    assert env_errors(experiment("ppo", "Pendulum-v1")) == []
    assert env_errors(experiment("dqn", "Acrobot-v1")) == []


def test_unknown_gymnasium_id_names_spec_env_id() -> None:
    errors = env_errors(experiment("ppo", "CartPol-v1"))
    assert [e.path for e in errors] == ["spec.env.id"]
    assert "CartPol-v1" in errors[0].message


def test_unimportable_module_names_spec_env_id() -> None:
    errors = env_errors(experiment("ppo", "no_such_package.envs:Thing"))
    assert [e.path for e in errors] == ["spec.env.id"]
    assert "no_such_package.envs" in errors[0].message


def test_missing_class_in_a_real_module(custom_env_module: str) -> None:
    errors = env_errors(experiment("ppo", f"{custom_env_module}:Hallway"))
    assert [e.path for e in errors] == ["spec.env.id"]
    assert "Hallway" in errors[0].message


def test_dqn_on_continuous_actions_is_refused() -> None:
    errors = env_errors(experiment("dqn", "Pendulum-v1"))
    assert [e.path for e in errors] == ["spec.algorithm"]
    assert "Box" in errors[0].message and "Discrete" in errors[0].message
    assert [e.path for e in env_errors(experiment("apex-dqn", "MountainCarContinuous-v0"))] == ["spec.algorithm"]


def test_env_config_the_env_rejects_names_spec_env_config(custom_env_module: str) -> None:
    errors = env_errors(experiment("ppo", f"{custom_env_module}:Corridor", {"width": 3}))
    assert [e.path for e in errors] == ["spec.env.config"]


def test_custom_env_class_gets_its_config(custom_env_module: str) -> None:
    assert env_errors(experiment("dqn", f"{custom_env_module}:Corridor", {"length": 5})) == []
    env = make_vector_env(f"{custom_env_module}:Corridor", {"length": 5}, num_envs=2)
    env.reset(seed=0)
    for _ in range(4):
        env.step([1, 1])
    _, _, terminated, _, _ = env.step([1, 1])
    assert terminated.tolist() == [True, True]  # 5 steps right with length 5
