"""The `preprocessing: atari` preset for rollout workers on ALE's own vector env.

`ale_py.vector_env.AtariVectorEnv` steps N games in C++ and preprocesses them there (no-op starts,
frame skip 4 with the max over the last two frames, 84x84 grayscale, a stack of 4, fire reset): the
same frames as Gymnasium's wrappers in `atari` (a test compares them), at about 1.5x the steps per
second, because no Python wrapper runs per env and step.

Three things are done here rather than by ALE, to keep the preset's meaning:
- A lost life ends the learner's episode but not the game. ALE's `episodic_life` restarts the whole
  game on a lost life, so it stays off; `life_loss_info` reports the loss as a termination while
  the game goes on. A termination without a drop in lives is the game's end (some games end with
  lives left). ALE resets a game on the step after it is over, so `GameScoreVector` says where
  (`info[RESETS]`).
- After a lost life, a game that waits for FIRE to go on gets it: ALE presses FIRE only when it resets a
  game, so the step after a lost life presses FIRE in place of the policy's action, and is no transition
  (`info[RESETS]` again). The single-env preset does the same in the reset that follows a lost life
  (EpisodicLife, then FireReset), evaluation after each lost life (FireAfterLifeLoss), and so do CleanRL's
  Atari scripts (Baselines' EpisodicLifeEnv and FireResetEnv; EnvPool's episodic life with fire reset):
  training and evaluation play the same game, and a policy never learns to wait with a ball that never comes.
- Rewards reach the learner clipped, but `GameScoreVector` first adds the unclipped ones up, so a
  finished game reports its score (`atari.GAME_RETURN`, `GAME_LENGTH`) as the single-env preset does.

Only a plain ALE id whose `env.config` the vector env understands takes this path; anything else
(extra wrappers, `obs_type`, `mode`, ...) keeps the SyncVectorEnv of single envs.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from kuberl.trainer.sampling.atari import (
    FRAME_SKIP,
    FRAME_STACK,
    GAME_LENGTH,
    GAME_RETURN,
    NOOP_MAX,
    SCREEN_SIZE,
    fire_action,
)
from kuberl.trainer.sampling.env_groups import StepResult

# info key: the envs whose next step is no transition: ALE resets the game (a game over), or FIRE is pressed
# after a lost life; a termination alone (a lost life in a game that needs no FIRE) is followed by a real step.
RESETS = "resets"

# ALE env kwargs (`spec.env.config` and the registered defaults) the vector env takes as they are.
VECTOR_KWARGS = frozenset({"game", "repeat_action_probability", "full_action_space", "max_num_frames_per_episode"})


def vector_kwargs(registered: dict[str, Any], config: dict[str, Any]) -> dict[str, Any] | None:
    """AtariVectorEnv's arguments for a registered ALE id and the user's env.config, or None when it
    cannot express them (then the single-env wrappers are used)."""
    # The registered frameskip is replaced by the preset's own; one in config is refused by the single-env path.
    kwargs = {**{k: v for k, v in registered.items() if k != "frameskip"}, **config}
    if set(kwargs) - VECTOR_KWARGS or "game" not in kwargs:
        return None
    return kwargs


class GameScoreVector(gym.vector.VectorWrapper):
    """Adds up each game's unclipped score and length, clips the rewards the learner sees to [-1, 1], and puts
    `game_return`/`game_length` (with Gymnasium's `_key` masks) in info on the step a game ends.

    A termination with fewer lives than the step before, but some left, is a lost life (ALE's own test); any
    other termination, and a truncation, ends the game. The env autoresets on the next step: that step starts
    the new game and scores nothing. With `fire` (the FIRE action of a game that waits for it), the step after
    a lost life presses FIRE whatever the policy chose; it counts in the game's score. `info[RESETS]` says which
    envs' next step is one of these two, for every env on every step.
    """

    def __init__(self, env: gym.vector.VectorEnv, fire: int | None = None):
        super().__init__(env)
        self.fire = fire
        self.game_return = np.zeros(self.num_envs, dtype=np.float64)
        self.game_length = np.zeros(self.num_envs, dtype=np.int64)
        self.game_over = np.zeros(self.num_envs, dtype=bool)
        self.firing = np.zeros(self.num_envs, dtype=bool)  # the next step presses FIRE
        self.lives = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.game_return[:] = 0.0
        self.game_length[:] = 0
        self.game_over[:] = False
        self.firing[:] = False
        obs, info = self.env.reset(**kwargs)
        self.lives[:] = info["lives"]
        return obs, info

    def step(self, actions: Any) -> StepResult:
        return self._scored(self.env.step(self._pressed(actions)))

    @property
    def steps_in_background(self) -> bool:
        """Whether `send` returns while ALE steps the games on its threads (`recv` collects them)."""
        return callable(getattr(self.env, "send", None))

    def send(self, actions: Any) -> None:
        """Start a step: ALE steps the games on its threads until `recv` (see sampling/env_groups.py)."""
        self.env.send(self._pressed(actions))  # type: ignore[attr-defined]

    def recv(self) -> StepResult:
        return self._scored(self.env.recv())  # type: ignore[attr-defined]

    def _pressed(self, actions: Any) -> Any:
        """The actions to step with: FIRE for the envs that lost a life on the step before."""
        if self.fire is None or not self.firing.any():
            return actions
        return np.where(self.firing, self.fire, np.asarray(actions))

    def _scored(self, result: StepResult) -> StepResult:
        obs, reward, terminated, truncated, info = result
        reward = np.asarray(reward, dtype=np.float64)
        lives = np.asarray(info["lives"], dtype=np.int64)
        starting = self.game_over
        self.game_return[starting] = 0.0
        self.game_length[starting] = 0
        playing = ~starting
        self.game_return += np.where(playing, reward, 0.0)
        self.game_length += playing
        lost_life = playing & terminated & (lives > 0) & (lives < self.lives)
        self.game_over = playing & (truncated | (terminated & ~lost_life))
        self.firing = lost_life & (self.fire is not None)
        self.lives = lives
        resets = self.game_over | self.firing
        info = {**info, GAME_RETURN: np.where(self.game_over, self.game_return, 0.0), f"_{GAME_RETURN}": self.game_over,
                GAME_LENGTH: np.where(self.game_over, self.game_length, 0), f"_{GAME_LENGTH}": self.game_over,
                RESETS: resets, f"_{RESETS}": np.ones(self.num_envs, dtype=bool)}
        return obs, np.sign(reward).astype(np.float32), terminated, truncated, info


def make_atari_vector(registered: gym.envs.registration.EnvSpec, config: dict[str, Any],
                      num_envs: int, threads: int = 1) -> gym.vector.VectorEnv | None:
    """The training preset as one AtariVectorEnv stepped by `threads` C++ threads, or None."""
    kwargs = vector_kwargs(dict(registered.kwargs), config)
    if kwargs is None:
        return None
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(
        num_envs=num_envs, num_threads=max(1, min(threads, num_envs)), autoreset_mode=AutoresetMode.NEXT_STEP, img_height=SCREEN_SIZE,
        img_width=SCREEN_SIZE, grayscale=True, stack_num=FRAME_STACK, frameskip=FRAME_SKIP, maxpool=True,
        noop_max=NOOP_MAX, episodic_life=False, life_loss_info=True, reward_clipping=False, use_fire_reset=True,
        **kwargs,
    )
    return GameScoreVector(env, fire_action([action.name for action in env.ale.get_action_set()]))
