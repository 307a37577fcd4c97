"""Proximal Policy Optimisation (Schulman et al., 2017), read top to bottom.

Sampling: rollout workers run the actor in numpy for vector observations and in
torch for images (PPOPolicyFactory; on the learner's GPU when sampling runs in its process), and keep
each action's log-probability. Learning: the learner evaluates V(obs) and
V(next_obs), computes GAE per worker batch, then runs `num_epochs` passes of
shuffled minibatches over the clipped surrogate objective with value
clipping, optional advantage normalisation, entropy bonus, gradient clipping
and an optional early stop on approximate KL.
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import PPOParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.learning.device import learner_autocast, obs_tensor, to_device
from kuberl.trainer.learning.gae import compute_gae
from kuberl.trainer.models.actor_critic import ActorCritic
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.greedy import GreedyActor
from kuberl.trainer.models.weights import state_dict_to_numpy, torch_bytes, torch_load_bytes
from kuberl.trainer.sampling.filters import RunningStats, stats_from_bytes, stats_to_bytes
from kuberl.trainer.sampling.policies import PPOPolicyFactory
from kuberl.trainer.sampling.rollout_worker import SampleBatch
from kuberl.trainer.sampling.worker_set import WorkerSet

MODEL_FILE = "model.pt"
OPTIMIZER_FILE = "optimizer.pt"
VALUE_SCALE_FILE = "value_scale.npz"


class PPOConfig(AlgorithmConfig):
    algorithm = "ppo"

    def algorithm_class(self) -> type[PPO]:
        return PPO


@dataclass
class PPOLoss:
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor


def ppo_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, values: torch.Tensor,
             old_values: torch.Tensor, returns: torch.Tensor, entropy: torch.Tensor, *, clip_param: float,
             vf_clip_param: float | None, vf_coeff: float, entropy_coeff: float) -> PPOLoss:
    """The clipped surrogate objective plus the (clipped) value loss minus the entropy bonus."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    policy_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_param, 1 + clip_param)).mean()
    value_error = (values - returns) ** 2
    if vf_clip_param is not None:
        clipped = old_values + (values - old_values).clamp(-vf_clip_param, vf_clip_param)
        value_error = torch.max(value_error, (clipped - returns) ** 2)
    value_loss = 0.5 * value_error.mean()
    entropy_mean = entropy.mean()
    total = policy_loss + vf_coeff * value_loss - entropy_coeff * entropy_mean
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_param).float().mean()
    return PPOLoss(total, policy_loss, value_loss, entropy_mean, approx_kl, clip_fraction)


def _torch_state_bytes(module: nn.Module | torch.optim.Optimizer) -> bytes:
    return torch_bytes(module.state_dict())


class ValueScale:
    """Running mean and std of value targets, so the critic learns unit-scale targets whatever the rewards.

    Pendulum's returns reach -1500 while CartPole's stay under 100: with the
    critic's targets normalised, one learning rate and value clip fit both. The
    count is capped so the statistics follow returns that grow as the policy learns.
    """

    MAX_COUNT = 100_000

    def __init__(self) -> None:
        self.stats = RunningStats(())

    def update(self, returns: np.ndarray) -> None:
        self.stats.push_batch(returns)
        self.stats.count = min(self.stats.count, self.MAX_COUNT)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.stats.mean) / (self.stats.std + 1e-8)).astype(np.float32)

    def denormalize(self, x: np.ndarray) -> np.ndarray:
        return (x * (self.stats.std + 1e-8) + self.stats.mean).astype(np.float32)


class PPO(Algorithm):
    params: PPOParams
    value_normalization = True

    def setup(self) -> None:
        p = self.params
        self.model = ActorCritic(self.observation_space, self.action_space, p.hidden, p.activation,
                                 EncoderSpec.from_params(p)).to(self.device)
        self.value_scale = ValueScale()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=p.lr, eps=1e-5, foreach=True)
        if p.anneal_lr and self.spec.stop.timesteps is None:
            warnings.warn("spec.config.annealLr needs spec.stop.timesteps; the learning rate stays constant",
                          RuntimeWarning, stacklevel=2)
        self.workers = WorkerSet(self.worker_config(), PPOPolicyFactory.from_params(p, self.sampling_device()),
                                 self.spec.rollouts.workers)
        self.sync_weights()

    def worker_weights(self) -> dict[str, np.ndarray]:
        return state_dict_to_numpy(self.model.actor)

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> dict[str, Any]:
        started = time.perf_counter()
        batches = self.collect()
        sample_seconds = time.perf_counter() - started
        env_steps = sum(b.env_steps for b in batches)
        batch = self.postprocess(batches)
        self.anneal_learning_rate(env_steps)
        learning = time.perf_counter()
        learner_stats = self.update(batch)
        learner_stats["updateSeconds"] = time.perf_counter() - learning
        self.sync_weights()
        return {
            "envSteps": env_steps,
            "learner": learner_stats,
            "sampler": {
                "envStepsPerSecond": env_steps / sample_seconds if sample_seconds > 0 else 0.0,
                "sampleSeconds": sample_seconds,
                "envSeconds": sum(b.env_seconds for b in batches),
                "batches": len(batches),
            },
        }

    def postprocess(self, batches: list[SampleBatch]) -> dict[str, torch.Tensor]:
        """Values, GAE advantages and returns per worker batch; valid rows of all batches as tensors."""
        p = self.params
        parts: list[dict[str, np.ndarray]] = []
        for batch in batches:
            d = batch.data
            values, next_values = self.value_scale.denormalize(self.values(np.stack([d["obs"], d["next_obs"]])))
            dones = d["terminateds"] | d["truncateds"] | ~d["valid"]
            advantages, returns = compute_gae(
                d["rewards"], values, next_values, d["terminateds"], dones, p.gamma, p.gae_lambda
            )
            valid = d["valid"]
            parts.append({
                "obs": d["obs"][valid], "actions": d["actions"][valid], "logp": d["logp"][valid],
                "values": values[valid].astype(np.float32), "advantages": advantages[valid], "returns": returns[valid],
            })
        merged = {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}
        if self.value_normalization:
            self.value_scale.update(merged["returns"])
            merged["returns"] = self.value_scale.normalize(merged["returns"])
            merged["values"] = self.value_scale.normalize(merged["values"])
        return to_device(merged, self.device)

    def values(self, obs: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """V(obs) for observations under any leading axes, in chunks (a batch of frames need not fit at once)."""
        lead = obs.shape[: obs.ndim - len(self.observation_space.shape)]
        flat = obs.reshape(-1, *self.observation_space.shape)
        with torch.no_grad(), learner_autocast(self.device, self.spec.learner.bf16):
            parts = [self.model.value(to_device({"obs": flat[i:i + chunk]}, self.device)["obs"]).float().cpu().numpy()
                     for i in range(0, len(flat), chunk)]
        return np.concatenate(parts).reshape(lead)

    def anneal_learning_rate(self, env_steps: int) -> None:
        p = self.params
        if p.anneal_lr and self.spec.stop.timesteps:
            remaining = max(0.0, 1.0 - (self.timesteps + env_steps) / self.spec.stop.timesteps)
            for group in self.optimizer.param_groups:
                group["lr"] = p.lr * max(remaining, 1e-3)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        p = self.params
        size = len(batch["obs"])
        # Reset steps make the batch a few rows short of envs x fragment; split it into about
        # size / minibatch_size near-equal minibatches so no row is dropped.
        num_minibatches = max(1, round(size / p.minibatch_size))
        sums: list[torch.Tensor] = []
        updates = 0
        epochs_done = 0
        for _epoch in range(p.num_epochs):
            order = torch.as_tensor(self.np_random.permutation(size), device=self.device)
            for idx in torch.tensor_split(order, num_minibatches):
                with learner_autocast(self.device, self.spec.learner.bf16):
                    new_logp, entropy, values = self.model.evaluate(batch["obs"][idx], batch["actions"][idx])
                new_logp, entropy, values = new_logp.float(), entropy.float(), values.float()
                advantages = batch["advantages"][idx]
                if p.normalize_advantages and len(idx) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                loss = ppo_loss(
                    new_logp, batch["logp"][idx], advantages, values, batch["values"][idx],
                    batch["returns"][idx], entropy, clip_param=p.clip_param, vf_clip_param=p.vf_clip_param,
                    vf_coeff=p.vf_coeff, entropy_coeff=p.entropy_coeff,
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.total.backward()
                if p.grad_clip is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), p.grad_clip, foreach=True)
                self.optimizer.step()
                updates += 1
                sums.append(torch.stack([loss.policy.detach(), loss.value.detach(), loss.entropy.detach(),
                                         loss.approx_kl, loss.clip_fraction]))
            epochs_done += 1
            if p.target_kl is not None and float(loss.approx_kl) > p.target_kl:
                break
        means = torch.stack(sums).mean(0).tolist()
        stats: dict[str, float] = dict(zip(("policyLoss", "valueLoss", "entropy", "approxKl", "clipFraction"), means,
                                           strict=True))
        stats.update(updates=updates, epochs=epochs_done, lr=self.optimizer.param_groups[0]["lr"],
                     batchSize=size)
        return stats

    # -- acting and state ------------------------------------------------------------------------
    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            obs_t = obs_tensor(obs, self.device)
            actor = self.model.actor
            actions = actor.distribution(obs_t).sample() if explore else actor.greedy(obs_t)
        return actions.cpu().numpy()

    def policy_module(self) -> nn.Module:
        return GreedyActor(copy.deepcopy(self.model.actor).cpu().eval())

    def learner_state(self) -> dict[str, bytes]:
        return {
            MODEL_FILE: _torch_state_bytes(self.model),
            OPTIMIZER_FILE: _torch_state_bytes(self.optimizer),
            VALUE_SCALE_FILE: stats_to_bytes(self.value_scale.stats),
        }

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        value_stats = stats_from_bytes(files.get(VALUE_SCALE_FILE, b""))
        if value_stats is not None:
            self.value_scale.stats = value_stats
        self.model.load_state_dict(torch_load_bytes(files[MODEL_FILE], self.device))
        if OPTIMIZER_FILE in files:
            self.optimizer.load_state_dict(torch_load_bytes(files[OPTIMIZER_FILE], self.device))


__all__ = ["PPO", "PPOConfig", "ppo_loss"]
