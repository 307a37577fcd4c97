"""The Catch pixel game the learning tests use, and the conv encoder they learn it with."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from kuberl.trainer.models.encoders import ConvEncoder
from kuberl_testing.catch_env import ENV_ID, MODEL, SIZE


def test_the_reward_comes_only_when_the_ball_lands_and_says_whether_the_paddle_is_under_it() -> None:
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=0)
    rewards = []
    for _ in range(SIZE - 1):
        ball_col = int(np.argwhere(obs[0] == 255)[0][1])
        paddle = int(np.argwhere(obs[0, SIZE - 1] == 128)[0][0])
        obs, reward, terminated, truncated, _ = env.step(2 if ball_col > paddle + 1 else 0 if ball_col < paddle else 1)
        rewards.append(reward)
    assert terminated and not truncated
    assert rewards == [0.0] * (SIZE - 2) + [1.0]  # steering under the ball catches it


def test_the_test_encoder_sees_every_pixel_of_the_screen() -> None:
    """A pixel no layer covers changes nothing downstream: with the paddle's row hidden the game is not learnable
    from one frame (DQN's Q-values could not tell a catch from a miss)."""
    torch.manual_seed(0)
    encoder = ConvEncoder(gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8), MODEL["conv"], MODEL["hidden"])
    blank = torch.zeros(1, 1, SIZE, SIZE, dtype=torch.uint8)
    with torch.no_grad():
        reference = encoder(blank)
        for row in range(SIZE):
            for col in range(SIZE):
                image = blank.clone()
                image[0, 0, row, col] = 255
                assert not torch.equal(encoder(image), reference), (row, col)
