"""A run's start builds each env once for its spaces, however many parts ask (`sampling.spaces_memo`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from kuberl.trainer.sampling import spaces_memo
from kuberl.trainer.sampling.envs import EnvSettings, env_spaces

ENV_ID = "SpacesMemoCount-v0"


class CountingEnv(gym.Env):
    builds = 0
    size = 3

    def __init__(self, size: int | None = None):
        type(self).builds += 1
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (size or self.size,), np.float32)
        self.action_space = gym.spaces.Discrete(2)


class OtherCountingEnv(CountingEnv):
    size = 5


@pytest.fixture(autouse=True)
def fresh() -> None:
    spaces_memo.forget_all()
    CountingEnv.builds = 0
    gym.register(ENV_ID, entry_point=CountingEnv)
    yield
    gym.registry.pop(ENV_ID, None)


def test_the_spaces_of_the_same_settings_come_from_one_build() -> None:
    first = env_spaces(EnvSettings(ENV_ID))
    again = env_spaces(ENV_ID, {})
    assert CountingEnv.builds == 1
    assert again == first and first.observation_space.shape == (3,)


def test_other_settings_build_again() -> None:
    env_spaces(EnvSettings(ENV_ID))
    bigger = env_spaces(EnvSettings(ENV_ID, {"size": 7}))
    assert CountingEnv.builds == 2
    assert bigger.observation_space.shape == (7,)


def test_an_id_registered_again_builds_again() -> None:
    env_spaces(EnvSettings(ENV_ID))
    gym.registry.pop(ENV_ID)
    gym.register(ENV_ID, entry_point=OtherCountingEnv)
    assert env_spaces(EnvSettings(ENV_ID)).observation_space.shape == (5,)


def test_a_failed_build_is_not_kept() -> None:
    with pytest.raises(TypeError):
        env_spaces(EnvSettings(ENV_ID, {"no_such_argument": 1}))
    with pytest.raises(TypeError):
        env_spaces(EnvSettings(ENV_ID, {"no_such_argument": 1}))
    assert env_spaces(EnvSettings(ENV_ID)).observation_space.shape == (3,)


def test_an_unknown_id_raises_what_the_build_raises() -> None:
    from kuberl.trainer.sampling.env_ids import EnvNotFound

    with pytest.raises(EnvNotFound, match="NoSuchEnvAnywhere"):
        env_spaces(EnvSettings("NoSuchEnvAnywhere-v0"))


def test_it_keeps_a_bounded_number_of_settings() -> None:
    for size in range(spaces_memo.KEPT + 5):
        env_spaces(EnvSettings(ENV_ID, {"size": size + 1}))
    builds = CountingEnv.builds
    env_spaces(EnvSettings(ENV_ID, {"size": spaces_memo.KEPT + 5}))  # the newest is kept
    env_spaces(EnvSettings(ENV_ID, {"size": 1}))  # the oldest was dropped
    assert CountingEnv.builds == builds + 1


def test_a_multi_agent_env_is_built_once_for_its_agent_spaces(monkeypatch: pytest.MonkeyPatch) -> None:
    from kuberl.trainer.multiagent import envs
    from kuberl.trainer.sampling.wrappers import WrapperSettings

    built = []
    real = envs.make_parallel_env

    def counting(env_id: str, config: dict | None = None, wrappers=()) -> object:
        built.append(env_id)
        return real(env_id, config, wrappers)

    monkeypatch.setattr(envs, "make_parallel_env", counting)
    first = envs.agent_spaces("mpe2:simple_spread_v3", {"N": 2})
    second = envs.agent_spaces("mpe2:simple_spread_v3", {"N": 2})
    three = envs.agent_spaces("mpe2:simple_spread_v3", {"N": 3})
    assert len(built) == 2
    assert second is first and len(first.agents) == 2 and len(three.agents) == 3
    wide = envs.agent_spaces("mpe2:simple_spread_v3", {"N": 2},
                             (WrapperSettings("supersuit:dtype_v0", {"dtype": "float64"}),))
    assert len(built) == 3 and wide.observation_spaces["agent_0"].dtype.name == "float64"  # wrappers: a new key
