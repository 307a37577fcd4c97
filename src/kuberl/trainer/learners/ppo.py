"""PPO's learner (Schulman et al., 2017), read top to bottom.

`PPOLearner.learner_batch(batches)` turns the rollout workers' fragments into the learner's batch:
1. the observations go to the learner's device once, as they are (uint8 frames stay uint8);
2. V(obs) in one pass; V(next_obs) is the next row's V(obs) inside an episode, and gets a pass of its own
   only for the last row and truncated steps (`bootstrap_rows`, `next_values_from`);
3. with `normalizeRewards`, the rewards divided by the running std of the discounted return (`RewardScale`);
   GAE advantages and returns per fragment (`compute_gae`), in the critic's unnormalised scale;
4. the valid rows of every fragment: the old values as the critic output them (the value clip is centred on
   them), the returns normalised with the statistics this batch updates (`ValueScale`).

`PPOLearner.update(batch)` then runs `num_epochs` passes of shuffled minibatches over `ppo_loss`: the
clipped surrogate, the (clipped) value loss, the entropy bonus; advantages normalised per minibatch,
gradient norms clipped, and an optional early stop on the approximate KL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import PPOParams
from kuberl.trainer.learners.files import LEARNER_FILE, MODEL_FILE, OPTIMIZER_FILE
from kuberl.trainer.learning.bootstrap import bootstrap_rows, next_values_from
from kuberl.trainer.learning.device import Bf16Setting, learner_autocast, learner_bf16, to_device
from kuberl.trainer.learning.gae import compute_gae
from kuberl.trainer.learning.reward_scale import RewardScale
from kuberl.trainer.models.actor_critic import ActorCritic
from kuberl.trainer.models.weights import torch_bytes, torch_load_bytes
from kuberl.trainer.sampling.filters import RunningStats, stats_from_bytes, stats_to_bytes
from kuberl.trainer.sampling.rollout_worker import SampleBatch, trace_ends

VALUE_SCALE_FILE = "value_scale.npz"
REWARD_SCALE_FILE = "reward_scale.npz"


@dataclass
class Current:
    """The policy and critic being trained, on a minibatch: log pi(a|s), the entropy, V(s)."""

    logp: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor


@dataclass
class Sampled:
    """What the minibatch's rows carry from sampling: log pi_old(a|s), V_old(s), advantages, returns."""

    logp: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


@dataclass
class PPOLoss:
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor


def ppo_loss(current: Current, sampled: Sampled, params: PPOParams) -> PPOLoss:
    """The clipped surrogate objective plus the (clipped) value loss minus the entropy bonus."""
    clip = params.clip_param
    log_ratio = current.logp - sampled.logp
    ratio = log_ratio.exp()
    advantages = sampled.advantages
    policy_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    value_error = (current.values - sampled.returns) ** 2
    if params.vf_clip_param is not None:
        clipped = sampled.values + (current.values - sampled.values).clamp(-params.vf_clip_param, params.vf_clip_param)
        value_error = torch.max(value_error, (clipped - sampled.returns) ** 2)
    value_loss = 0.5 * value_error.mean()
    entropy = current.entropy.mean()
    total = policy_loss + params.vf_coeff * value_loss - params.entropy_coeff * entropy
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip).float().mean()
    return PPOLoss(total, policy_loss, value_loss, entropy, approx_kl, clip_fraction)


class ValueScale:
    """Running mean and std of value targets, so the critic learns unit-scale targets whatever the rewards.

    Pendulum's returns reach -1500 while CartPole's stay under 100: with the
    critic's targets normalised, one learning rate and value clip fit both. The
    count is capped so the mean follows returns that grow as the policy learns. The sum
    of squares is not capped with it, so past MAX_COUNT targets the std grows like
    sqrt(targets seen / MAX_COUNT): the critic's targets shrink and its share of the loss
    falls as training goes on. Every PPO default (Pong, MuJoCo) was measured with this;
    a true window of MAX_COUNT targets trained Pong slower (bench/notes/benchmarks-log.md).
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


class PPOLearner:
    """The actor-critic, its optimizer and the value scale; `update(batch)` is one iteration's epochs."""

    def __init__(self, model: ActorCritic, params: PPOParams, device: torch.device, rng: np.random.Generator, *,
                 bf16: Bf16Setting = False):
        self.params = params
        self.device = device
        self.bf16 = learner_bf16(bf16, device, model)  # spec.learner.bf16 resolved on this device
        self.model = model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=params.lr, eps=1e-5, foreach=True)
        self.value_scale = ValueScale()
        self.reward_scale = RewardScale(params.gamma) if params.normalize_rewards else None
        self.rng = rng  # the algorithm's generator: its state is in every checkpoint
        self.updates_total = 0

    # -- the learner's batch -------------------------------------------------------------------------
    def learner_batch(self, batches: list[SampleBatch]) -> dict[str, torch.Tensor]:
        """Values, GAE advantages and returns per fragment; the valid rows of all of them, on the device."""
        p = self.params
        parts: list[dict[str, torch.Tensor]] = []
        returns: list[np.ndarray] = []
        for batch in batches:
            d = batch.data
            obs = to_device({"obs": d["obs"]}, self.device)["obs"]
            behaviour_logp = d["logp"]
            if self.bf16:
                # The ratio's denominator from the learner's own bfloat16 pass over the weights that sampled
                # (PPO samples with the learner's weights), not the sampler's float32 one: the two differ by
                # about 0.007 in log pi, a tenth of a PPO step, which would otherwise be noise in every ratio.
                actions = to_device({"actions": d["actions"]}, self.device)["actions"].flatten(0, 1)
                outputs, logp = self._critic_pass(obs.flatten(0, 1), actions)
                assert logp is not None  # given the actions, the pass returns their log-probs
                behaviour_logp = logp.reshape(d["logp"].shape)
            else:
                outputs, _ = self._critic_pass(obs.flatten(0, 1))
            outputs = outputs.reshape(d["rewards"].shape)
            values = self.value_scale.denormalize(outputs)
            dones = trace_ends(d)
            next_values = self._next_values(values, dones, d)
            rewards = d["rewards"] if self.reward_scale is None else self.reward_scale.scale(batch)
            advantages, fragment_returns = compute_gae(
                rewards, values, next_values, d["terminateds"], dones, p.gamma, p.gae_lambda
            )
            valid = d["valid"]
            rows = to_device({"actions": d["actions"][valid], "logp": behaviour_logp[valid],
                              "advantages": advantages[valid], "valid": valid}, self.device)
            parts.append({"obs": obs[rows.pop("valid")], **rows})
            returns.append(np.stack([outputs[valid], fragment_returns[valid].astype(np.float32)]))
        merged = {k: torch.cat([part[k] for part in parts]) for k in parts[0]}
        # The old values stay the critic's outputs, in the statistics it was trained in: normalising their
        # denormalised form again with the updated statistics would centre the value clip on a value the
        # critic never output. Only the targets take this batch's statistics.
        outputs, targets = np.concatenate(returns, axis=1)
        self.value_scale.update(targets)
        targets = self.value_scale.normalize(targets)
        return {**merged, **to_device({"values": outputs, "returns": targets}, self.device)}

    def _autocast(self) -> Any:
        """The learner's bfloat16 autocast (`spec.learner.bf16`) for the conv encoder's passes."""
        return learner_autocast(self.device, self.bf16)

    def _critic_pass(self, obs: torch.Tensor, actions: torch.Tensor | None = None,
                     chunk: int = 4096) -> tuple[np.ndarray, np.ndarray | None]:
        """The critic's (normalised) output for observations already on the device, in chunks; with `actions`,
        log pi(a|s) from the same encoder pass."""
        values: list[torch.Tensor] = []
        logps: list[torch.Tensor] = []
        with torch.no_grad():
            for i in range(0, len(obs), chunk):
                if actions is None:
                    values.append(self.model.value(obs[i:i + chunk], self._autocast))
                    continue
                logp, _, value = self.model.evaluate(obs[i:i + chunk], actions[i:i + chunk], self._autocast)
                values.append(value)
                logps.append(logp)
        logp_out = torch.cat(logps).cpu().numpy().astype(np.float32) if logps else None
        return torch.cat(values).float().cpu().numpy(), logp_out

    def _next_values(self, values: np.ndarray, dones: np.ndarray, d: dict[str, np.ndarray]) -> np.ndarray:
        """V(next_obs_t) in the unnormalised scale: the next row's V(obs) inside an episode, a pass of its own
        for the last row and truncated steps, 0 where nothing is bootstrapped."""
        # Copies, not views: flags from a rollout worker arrive read-only (Ray's object store), which torch warns of.
        reuse, compute = bootstrap_rows(torch.tensor(d["terminateds"]), torch.tensor(dones), torch.tensor(d["valid"]))
        computed = None
        if compute.any():
            next_obs = to_device({"obs": d["next_obs"][compute.numpy()]}, self.device)["obs"]
            computed = torch.from_numpy(self.value_scale.denormalize(self._critic_pass(next_obs)[0]))
        return next_values_from(torch.from_numpy(values), reuse, computed, compute).numpy()

    # -- the update ----------------------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        p = self.params
        size = len(batch["obs"])
        # Reset steps make the batch a few rows short of envs x fragment; split it into about
        # size / minibatch_size near-equal minibatches so no row is dropped.
        num_minibatches = max(1, round(size / p.minibatch_size))
        sums: list[torch.Tensor] = []
        updates = epochs_done = 0
        for _epoch in range(p.num_epochs):
            order = torch.as_tensor(self.rng.permutation(size), device=self.device)
            for idx in torch.tensor_split(order, num_minibatches):
                logp, entropy, values = self.model.evaluate(batch["obs"][idx], batch["actions"][idx], self._autocast)
                current = Current(logp, entropy, values)
                advantages = batch["advantages"][idx]
                if p.normalize_advantages and len(idx) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                sampled = Sampled(batch["logp"][idx], batch["values"][idx], advantages, batch["returns"][idx])
                loss = ppo_loss(current, sampled, p)
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
        self.updates_total += updates
        stats.update(updates=updates, updatesTotal=self.updates_total, epochs=epochs_done,
                     lr=self.optimizer.param_groups[0]["lr"], batchSize=size)
        return stats

    # -- checkpoints ---------------------------------------------------------------------------------
    def state_files(self) -> dict[str, bytes]:
        return {
            MODEL_FILE: torch_bytes(self.model.state_dict()),
            OPTIMIZER_FILE: torch_bytes(self.optimizer.state_dict()),
            VALUE_SCALE_FILE: stats_to_bytes(self.value_scale.stats),
            **({} if self.reward_scale is None else {REWARD_SCALE_FILE: stats_to_bytes(self.reward_scale.stats)}),
            LEARNER_FILE: json.dumps({"updates": self.updates_total}).encode(),
        }

    def load_state_files(self, files: dict[str, bytes]) -> None:
        value_stats = stats_from_bytes(files.get(VALUE_SCALE_FILE, b""))
        if value_stats is not None:
            self.value_scale.stats = value_stats
        reward_stats = stats_from_bytes(files.get(REWARD_SCALE_FILE, b""))
        if reward_stats is not None and self.reward_scale is not None:
            self.reward_scale.stats = reward_stats
        self.model.load_state_dict(torch_load_bytes(files[MODEL_FILE], self.device))
        if OPTIMIZER_FILE in files:
            self.optimizer.load_state_dict(torch_load_bytes(files[OPTIMIZER_FILE], self.device))
        if LEARNER_FILE in files:
            self.updates_total = int(json.loads(files[LEARNER_FILE])["updates"])


__all__ = ["Current", "PPOLearner", "PPOLoss", "Sampled", "ValueScale", "ppo_loss"]
