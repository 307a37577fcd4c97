"""Why DQN's vector defaults use the squared TD loss: fitted Q-iteration on a fixed CartPole-v1 replay.

10,000 transitions of random play, kuberl's Q-network (layers 120 and 84, no dueling), Adam at 2.5e-4, batches of
128, plain DQN targets r + discount * max_a Q_target(s', a), the target synced every `sync` updates. Every
discounted return is bounded by 1 / (1 - 0.99) = 100, and each sync can raise the targets by at most about 1, so a
mean Q above that is the fit running away. Prints the batch's mean Q every 500 updates for each loss and interval.

    .venv/bin/python -m bench.dqn_td_loss            # about 30 s on 2 cores
"""

from __future__ import annotations

import argparse
import copy
import json

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from kuberl.trainer.cpu import cpu_summary
from kuberl.trainer.models.q_network import QNetwork

LOSSES = {"mse": F.mse_loss, "huber": F.huber_loss}


def random_replay(transitions: int, seed: int = 0) -> dict[str, torch.Tensor]:
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows: dict[str, list] = {"obs": [], "action": [], "reward": [], "next_obs": [], "discount": []}
    for _ in range(transitions):
        action = int(rng.integers(2))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in (("obs", obs), ("action", action), ("reward", reward), ("next_obs", next_obs),
                           ("discount", 0.0 if terminated else 0.99)):
            rows[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    out = {key: torch.tensor(np.array(values), dtype=torch.float32) for key, values in rows.items()}
    out["action"] = out["action"].long()
    return out


def fitted_q(replay: dict[str, torch.Tensor], loss: str, sync: int, updates: int, seed: int = 0) -> list[float]:
    """The batch's mean Q(s, a) every 500 updates."""
    torch.manual_seed(seed)
    online = QNetwork(4, 2, [120, 84], "relu", dueling=False)
    target = copy.deepcopy(online)
    optimizer = torch.optim.Adam(online.parameters(), lr=2.5e-4)
    batches = torch.Generator().manual_seed(seed + 1)
    means = []
    for update in range(1, updates + 1):
        idx = torch.randint(0, len(replay["obs"]), (128,), generator=batches)
        q = online(replay["obs"][idx]).gather(1, replay["action"][idx, None]).squeeze(1)
        with torch.no_grad():
            targets = replay["reward"][idx] + replay["discount"][idx] * target(replay["next_obs"][idx]).max(1).values
        optimizer.zero_grad()
        LOSSES[loss](q, targets).backward()
        optimizer.step()
        if update % sync == 0:
            target.load_state_dict(online.state_dict())
        if update % 500 == 0:
            means.append(round(q.mean().item(), 1))
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=3_000)
    args = parser.parse_args()
    replay = random_replay(10_000)
    for loss, sync in (("mse", 50), ("huber", 50), ("huber", 200), ("mse", 200)):
        means = fitted_q(replay, loss, sync, args.updates)
        print(json.dumps({"loss": loss, "syncEveryUpdates": sync, "meanQEvery500Updates": means, **cpu_summary()}),
              flush=True)


if __name__ == "__main__":
    main()
