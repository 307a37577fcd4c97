"""`env.preprocessing: atari`: the DeepMind preset (Mnih et al., 2015) on Gymnasium's own wrappers.

Gymnasium's AtariPreprocessing does the no-op starts (up to 30), the frame skip of 4 with the
max over the last two frames, and the 84x84 grayscale; FrameStackObservation stacks 4 frames and
ClipReward clips rewards to [-1, 1] (Atari rewards are integers, so this is their sign). Gymnasium
has no episodic-life or fire-reset wrapper; the ones below are small (evaluation, without episodic life,
presses FIRE after a lost life as training does). `GameScore` sits inside them
and reports the unclipped score of the whole game (all lives) in `info`, which the rollout
worker records as the episode's return.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, SupportsFloat, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation

FRAME_SKIP = 4
NOOP_MAX = 30
SCREEN_SIZE = 84
FRAME_STACK = 4
# info keys of a finished game, present only on the step that ends it.
GAME_RETURN = "game_return"
GAME_LENGTH = "game_length"


class Lives(Protocol):
    def lives(self) -> int: ...


@runtime_checkable
class ALEGame(Protocol):
    """What these wrappers read of ale_py's AtariEnv (ale-py is an optional extra, so not imported here)."""

    @property
    def ale(self) -> Lives: ...

    def get_action_meanings(self) -> list[str]: ...


def ale_game(env: gym.Env) -> ALEGame:
    """The ALE game under `env`'s wrappers."""
    game = env.unwrapped
    if not isinstance(game, ALEGame):
        raise TypeError(f"{game!r} is not an ALE game (ale_py's AtariEnv)")
    return game


class GameScore(gym.Wrapper):
    """Adds the game's unclipped return and length (agent steps) to `info` on the step that ends it."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.game_return = 0.0
        self.game_length = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.game_return, self.game_length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_return += float(reward)
        self.game_length += 1
        if terminated or truncated:
            info = {**info, GAME_RETURN: self.game_return, GAME_LENGTH: self.game_length}
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for the learner; the game goes on (reset only steps a no-op)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.game = ale_game(env)  # once: the check costs more than reading the lives
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.game.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game: start a new one
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.game.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE after each reset, for games that wait for it before they start."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class FireAfterLifeLoss(gym.Wrapper):
    """Presses FIRE after a lost life, for games that wait for it to go on (evaluation: training gets the same
    from EpisodicLife's reset followed by FireReset), so that a policy plays on as it learnt to."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.game = ale_game(env)
        self.lives = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.lives = self.game.ale.lives()
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.game.ale.lives()
        if 0 < lives < self.lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(1)
            reward = float(reward) + float(fire_reward)
        self.lives = lives
        return obs, reward, terminated, truncated, info


def is_atari(env: gym.Env) -> bool:
    return hasattr(env.unwrapped, "ale")


def is_ale_spec(registered: gym.envs.registration.EnvSpec) -> bool:
    """The registered id is one of ALE's (its entry point is in ale_py)."""
    return str(registered.entry_point).startswith("ale_py")


def fire_action(meanings: Sequence[str]) -> int | None:
    """The FIRE action of a game that waits for it to start or go on, else None: FIRE second of at least three
    actions (Baselines' FireResetEnv's test, which CleanRL's Atari scripts keep)."""
    return 1 if len(meanings) >= 3 and meanings[1] == "FIRE" else None


def has_fire(env: gym.Env) -> bool:
    return fire_action(ale_game(env).get_action_meanings()) is not None


def atari_preset(env: gym.Env, *, training: bool) -> gym.Env:
    """Wrap an ALE env made with `frameskip=1`. training=True adds episodic life and reward clipping."""
    env = AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=SCREEN_SIZE,
                             grayscale_obs=True, scale_obs=False, terminal_on_life_loss=False)
    env = GameScore(env)
    if training:
        env = EpisodicLife(env)
    if has_fire(env):
        env = FireReset(env) if training else FireReset(FireAfterLifeLoss(env))
    if training:
        env = ClipReward(env, -1.0, 1.0)
    return FrameStackObservation(env, FRAME_STACK)


def game_scores(info: dict[str, Any], done: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From a vector env's info: which done envs ended a game, and its return and length."""
    source = info.get("final_info", info) if "final_info" in info else info
    ended = np.asarray(source.get(f"_{GAME_RETURN}", np.zeros_like(done)), dtype=bool) & done
    returns = np.asarray(source.get(GAME_RETURN, np.zeros(len(done))), dtype=np.float64)
    lengths = np.asarray(source.get(GAME_LENGTH, np.zeros(len(done))), dtype=np.int64)
    return ended, returns, lengths
