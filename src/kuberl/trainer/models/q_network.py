"""The Q-learning parts DQN and Ape-X share: the Q-network, the epsilon-greedy policy rollout workers
run, n-step transitions from a rollout batch (with the worker's own initial priorities), and the
learner (double DQN, target network, importance-weighted Huber loss) that runs on the CPU or a GPU.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import DQNParams
from kuberl.trainer.models.mlp import ACTIVATIONS, layer, obs_size, state_dict_to_numpy
from kuberl.trainer.replay.nstep import nstep_transitions, q_targets, weighted_huber_loss
from kuberl.trainer.sampling.rollout_worker import SampleBatch

TRANSITION_KEYS = ("obs", "action", "reward", "next_obs", "discount")


class QNetwork(nn.Module):
    """An MLP from observations to one Q-value per action; dueling splits it into V(s) + A(s, a) - mean A."""

    def __init__(self, in_features: int, n_actions: int, hidden: Sequence[int], activation: str, dueling: bool):
        super().__init__()
        layers: list[nn.Module] = []
        size = in_features
        for width in hidden:
            layers += [layer(size, width), ACTIVATIONS[activation]()]
            size = width
        self.body = nn.Sequential(*layers)
        self.dueling = dueling
        self.advantage = layer(size, n_actions, 1.0)
        self.value = layer(size, 1, 1.0) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.body(obs.flatten(1))
        advantage = self.advantage(features)
        if self.value is None:
            return advantage
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


def load_weights(network: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Load numpy weights; copies, since arrays from Ray's object store are read-only."""
    network.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})


def build_q_network(observation_space: gym.Space, action_space: gym.Space, params: DQNParams) -> QNetwork:
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"DQN needs a Discrete action space, got {action_space}")
    return QNetwork(obs_size(observation_space), int(action_space.n), params.hidden, params.activation, params.dueling)


class QPolicy:
    """Epsilon-greedy over a CPU copy of the Q-network; keeps Q(s, a) of each action for local priorities."""

    def __init__(self, network: QNetwork, n_actions: int, seed: int):
        self.network = network.eval()
        self.n_actions = n_actions
        self.epsilon = 1.0
        self.rng = np.random.default_rng(seed)

    def configure(self, epsilon: float | None = None) -> None:
        if epsilon is not None:
            self.epsilon = float(epsilon)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        load_weights(self.network, weights)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.network(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        q = self.q_values(obs)
        actions = q.argmax(axis=1)
        if explore and self.epsilon > 0:
            random = self.rng.random(len(actions)) < self.epsilon
            actions = np.where(random, self.rng.integers(0, self.n_actions, len(actions)), actions)
        q_taken = np.take_along_axis(q, actions[:, None], axis=1)[:, 0].astype(np.float32)
        return actions.astype(np.int64), {"q_taken": q_taken}


@dataclass(frozen=True)
class QPolicyFactory:
    """Builds a worker's QPolicy; a plain dataclass so that it pickles to Ray actors."""

    hidden: tuple[int, ...]
    activation: str
    dueling: bool

    @classmethod
    def from_params(cls, params: DQNParams) -> QPolicyFactory:
        return cls(tuple(params.hidden), params.activation, params.dueling)

    def __call__(self, observation_space: gym.Space, action_space: gym.Space, seed: int) -> QPolicy:
        torch.manual_seed(seed)
        network = QNetwork(obs_size(observation_space), int(action_space.n), self.hidden, self.activation, self.dueling)
        return QPolicy(network, int(action_space.n), seed)


def transitions_from_batch(batch: SampleBatch, *, gamma: float, n_step: int) -> dict[str, np.ndarray]:
    """n-step transitions of a rollout batch, valid rows only (see `kuberl.trainer.replay.nstep`)."""
    data = batch.data
    out = nstep_transitions(
        data["obs"], data["actions"], data["rewards"], data["next_obs"], data["terminateds"], data["truncateds"],
        gamma=gamma, n=n_step,
    )
    valid = data["valid"].reshape(-1)
    out = {k: v[valid] for k, v in out.items()}
    out["obs"] = out["obs"].astype(np.float32, copy=False)
    out["next_obs"] = out["next_obs"].astype(np.float32, copy=False)
    if "q_taken" in data:
        out["q_taken"] = data["q_taken"].reshape(-1)[valid]
    return out


def local_priorities(policy: QPolicy, transitions: dict[str, np.ndarray]) -> np.ndarray:
    """|n-step TD error| under the worker's own network (Ape-X: actors prioritise what they add)."""
    next_q = policy.q_values(transitions["next_obs"]).max(axis=1)
    target = transitions["reward"] + transitions["discount"] * next_q
    return np.abs(target - transitions["q_taken"]).astype(np.float32)


def to_device(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """numpy -> torch on `device`; on a GPU through pinned memory with non-blocking copies."""
    # Arrays from Ray's object store are read-only views; torch wants memory it may write.
    tensors = {k: torch.from_numpy(v if v.flags.writeable and v.flags.c_contiguous else np.array(v))
               for k, v in batch.items()}
    if device.type == "cpu":
        return tensors
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in tensors.items()}


class QLearner:
    """Online and target Q-networks and their optimizer: one gradient step per `update(batch)`."""

    def __init__(self, network: QNetwork, params: DQNParams, device: torch.device):
        self.params = params
        self.device = device
        self.online = network.to(device)
        self.target = copy.deepcopy(self.online).eval()
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=params.lr)
        self.updates = 0
        self.target_syncs = 0
        self._loss_sum = 0.0
        self._q_sum = 0.0
        self._stat_count = 0

    def update(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """One step on a replay sample (obs, action, reward, next_obs, discount[, weights]); |TD errors| back."""
        t = to_device({k: batch[k] for k in (*TRANSITION_KEYS, "weights") if k in batch}, self.device)
        q = self.online(t["obs"])
        q_taken = q.gather(1, t["action"].long().unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q_target = self.target(t["next_obs"])
            next_q_online = self.online(t["next_obs"]) if self.params.double_q else None
            targets = q_targets(t["reward"], t["discount"], next_q_target, next_q_online)
        loss, td_errors = weighted_huber_loss(q_taken, targets, t.get("weights"))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.params.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.online.parameters(), self.params.grad_clip)
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.params.target_update_interval == 0:
            self.sync_target()
        self._loss_sum += loss.item()
        self._q_sum += q_taken.mean().item()
        self._stat_count += 1
        return td_errors.abs().cpu().numpy()

    def sync_target(self) -> None:
        self.target.load_state_dict(self.online.state_dict())
        self.target_syncs += 1

    def take_stats(self) -> dict[str, Any]:
        """Mean loss and Q since the last call, and the running counters."""
        n = self._stat_count
        stats = {
            "updates": self.updates,
            "targetSyncs": self.target_syncs,
            "loss": self._loss_sum / n if n else None,
            "meanQ": self._q_sum / n if n else None,
            "device": str(self.device),
        }
        self._loss_sum = self._q_sum = 0.0
        self._stat_count = 0
        return stats

    def weights(self) -> dict[str, np.ndarray]:
        return state_dict_to_numpy(self.online)

    def state_files(self) -> dict[str, bytes]:
        """Checkpoint files: both networks, the optimizer and the update counters."""
        buffer = io.BytesIO()
        torch.save(
            {
                "online": self.online.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates, "targetSyncs": self.target_syncs,
            },
            buffer,
        )
        return {"q_learner.pt": buffer.getvalue()}

    def load_state_files(self, files: dict[str, bytes]) -> None:
        state = torch.load(io.BytesIO(files["q_learner.pt"]), map_location=self.device, weights_only=True)
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.target_syncs = int(state["targetSyncs"])
