"""DQN (algorithm "dqn", Mnih et al. 2015, with double Q, dueling and prioritized replay), read top to bottom.

The loss: for an n-step transition (obs, action, reward, next_obs, discount) from replay,
the target is reward + discount * Q_target(next_obs, argmax_a Q_online(next_obs, a)) (double DQN;
plain DQN takes the argmax with the target network), and the loss is the importance-weighted
Huber loss between Q_online(obs, action) and that target. `QLearner.update` is one gradient
step of it; Ape-X (`kuberl.trainer.algorithms.apex`) runs the same learner in an actor.

Each iteration: set the workers' epsilon from the schedule, sample one fragment from every
worker, turn it into n-step transitions in the compact form (`kuberl.trainer.replay.frames`:
frames stored once, in their own dtype), add them to replay (new transitions get the largest
priority seen), then run `replay_ratio` learner updates per env step once `learning_starts`
env steps are in, and send the new priorities back to the buffer (`kuberl.trainer.replay.local`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kuberl.api.hyperparams import DQNParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.learning.device import learner_autocast, obs_tensor, to_device
from kuberl.trainer.learning.schedules import linear_schedule
from kuberl.trainer.models.greedy import GreedyQ
from kuberl.trainer.models.q_network import QNetwork, build_q_network
from kuberl.trainer.models.weights import state_dict_to_numpy, torch_bytes, torch_load_bytes
from kuberl.trainer.replay.local import LocalReplay
from kuberl.trainer.replay.nstep import TRANSITION_KEYS
from kuberl.trainer.sampling.policies import QPolicyFactory
from kuberl.trainer.sampling.worker_set import WorkerSet

SCHEDULE_FILE = "dqn_schedule.json"
LEARNER_FILE = "q_learner.pt"


class DQNConfig(AlgorithmConfig):
    algorithm = "dqn"

    def algorithm_class(self) -> type[DQN]:
        return DQN


# -- the loss -------------------------------------------------------------------------------------
def q_targets(
    reward: torch.Tensor,
    discount: torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """reward + discount * Q_target(s', a*): double DQN picks a* with the online net, plain DQN with the target."""
    chooser = next_q_online if next_q_online is not None else next_q_target
    best = chooser.argmax(dim=1, keepdim=True)
    return reward + discount * next_q_target.gather(1, best).squeeze(1)


def weighted_huber_loss(
    q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, td_errors): the importance-weighted mean Huber loss (delta 1) and the raw TD errors."""
    td_errors = targets - q_taken
    per_sample = F.huber_loss(q_taken, targets, reduction="none", delta=1.0)
    loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
    return loss, td_errors.detach()


class QLearner:
    """Online and target Q-networks and their optimizer: one gradient step per `update(batch)`."""

    def __init__(self, network: QNetwork, params: DQNParams, device: torch.device, bf16: bool = False):
        self.params = params
        self.device = device
        self.bf16 = bf16
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
        with learner_autocast(self.device, self.bf16):
            q = self.online(t["obs"]).float()
        q_taken = q.gather(1, t["action"].long().unsqueeze(1)).squeeze(1)
        with torch.no_grad(), learner_autocast(self.device, self.bf16):
            next_q_target = self.target(t["next_obs"]).float()
            next_q_online = self.online(t["next_obs"]).float() if self.params.double_q else None
        with torch.no_grad():
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
        state = {
            "online": self.online.state_dict(), "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(), "updates": self.updates, "targetSyncs": self.target_syncs,
        }
        return {LEARNER_FILE: torch_bytes(state)}

    def load_state_files(self, files: dict[str, bytes]) -> None:
        state = torch_load_bytes(files[LEARNER_FILE], self.device)
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.target_syncs = int(state["targetSyncs"])


# -- the algorithm --------------------------------------------------------------------------------
class DQN(Algorithm):
    params: DQNParams

    def setup(self) -> None:
        params = self.params
        self.learner = QLearner(build_q_network(self.observation_space, self.action_space, params), params, self.device,
                                bf16=self.spec.learner.bf16)
        self.local_replay = LocalReplay(self.spec, params, self.observation_space, self.frame_stack)
        self.workers = WorkerSet(self.worker_config(), QPolicyFactory.from_params(params), self.spec.rollouts.workers)
        self.sync_weights()

    # -- schedules --------------------------------------------------------------------------------
    def epsilon(self, timesteps: int | None = None) -> float:
        p = self.params
        return linear_schedule(self.timesteps if timesteps is None else timesteps, p.epsilon_start, p.epsilon_end,
                               p.epsilon_timesteps)

    # -- one iteration ----------------------------------------------------------------------------
    def training_step(self) -> dict[str, Any]:
        assert self.workers is not None
        epsilon = self.epsilon()
        self.workers.configure_policies(epsilon=epsilon)
        batches = self.collect()
        env_steps = sum(b.env_steps for b in batches)
        self.local_replay.add(batches)
        updates = self.local_replay.train(self.timesteps + env_steps, env_steps, self.learner.update)
        if updates:
            self.sync_weights()
        learner = self.learner.take_stats()
        learner.update(epsilon=epsilon, updatesThisIteration=updates)
        return {"envSteps": env_steps, "learner": learner, "replay": self.local_replay.stats()}

    # -- the Algorithm contract -------------------------------------------------------------------
    def worker_weights(self) -> dict[str, np.ndarray]:
        return self.learner.weights()

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            q = self.learner.online(obs_tensor(obs, self.device)).cpu().numpy()
        actions = q.argmax(axis=1)
        if explore:
            random = self.np_random.random(len(actions)) < self.epsilon()
            actions = np.where(random, self.np_random.integers(0, q.shape[1], len(actions)), actions)
        return actions

    def policy_module(self) -> nn.Module:
        return GreedyQ(copy.deepcopy(self.learner.online).cpu().eval())

    def learner_state(self) -> dict[str, bytes]:
        files = self.learner.state_files()
        schedule = {**self.local_replay.schedule(), "epsilon": self.epsilon()}
        files[SCHEDULE_FILE] = json.dumps(schedule).encode()
        return files

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.learner.load_state_files(files)
        if SCHEDULE_FILE in files:
            self.local_replay.restore_schedule(json.loads(files[SCHEDULE_FILE]))

