"""IMPALA (algorithm "impala", Espeholt et al. 2018): rollout workers that never wait for the learner, and a
learner that corrects for their policy lag with V-trace.

- Rollout workers (Ray actors spread over the nodes) sample fragments continuously with the weights they
  hold and return them through a bounded queue (`kuberl.trainer.distributed.fragment_queue`).
- The learner (this process, on the GPU where `spec.learner.gpus` asks for one) assembles train batches
  of whole fragments, keeps `buffer_batches` of them and learns from each `batch_reuse` times; it waits
  for sampling only when it has nothing left to learn from. Every `broadcast_interval` updates it
  publishes its weights (one object-store put).
- Each update's batch carries the policy versions that sampled it: the lag (learner version - behaviour
  version, in broadcasts and in updates) is reported per iteration as mean and max.

The loss: V-trace targets (`kuberl.trainer.learning.vtrace`) for the critic, the policy gradient with
V-trace advantages, an entropy bonus. APPO (`kuberl.trainer.algorithms.appo`) swaps the policy term.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import IMPALAParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.distributed.fragment_queue import FragmentQueue
from kuberl.trainer.learning.device import learner_autocast, to_device
from kuberl.trainer.learning.vtrace import VTraceReturns, bootstrap_rows, next_values_from, vtrace
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.greedy import GreedyActor
from kuberl.trainer.models.policy_value import PolicyValueNet
from kuberl.trainer.models.weights import state_dict_to_numpy, torch_bytes, torch_load_bytes
from kuberl.trainer.sampling.policies import PolicyHeadFactory
from kuberl.trainer.sampling.rollout_worker import SampleBatch

MODEL_FILE = "model.pt"
OPTIMIZER_FILE = "optimizer.pt"
LEARNER_FILE = "learner.json"
BATCH_KEYS = ("obs", "next_obs", "actions", "rewards", "terminateds", "truncateds", "valid", "logp")


class IMPALAConfig(AlgorithmConfig):
    algorithm = "impala"

    def algorithm_class(self) -> type[IMPALA]:
        return IMPALA


@dataclass
class LossTerms:
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    extra: dict[str, torch.Tensor]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def impala_loss(logp: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, targets: VTraceReturns,
                mask: torch.Tensor, *, vf_coeff: float, entropy_coeff: float) -> LossTerms:
    """-log pi(a|s) times the V-trace advantage, plus the critic's squared error to v_s, minus the entropy bonus."""
    policy = -masked_mean(logp * targets.pg_advantages, mask)
    value = 0.5 * masked_mean((values - targets.vs) ** 2, mask)
    entropy_mean = masked_mean(entropy, mask)
    return LossTerms(policy + vf_coeff * value - entropy_coeff * entropy_mean, policy, value, entropy_mean, {})


@dataclass(eq=False)
class TrainBatch:
    tensors: dict[str, torch.Tensor]  # time-major [T, B, ...]
    versions: np.ndarray  # the policy version that sampled each fragment
    uses: int = 0


class IMPALA(Algorithm):
    params: IMPALAParams

    def setup(self) -> None:
        p, spec = self.params, self.spec
        self.model = PolicyValueNet(self.observation_space, self.action_space, EncoderSpec.from_params(p)).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=p.lr, eps=1e-5, foreach=True)
        self.updates = 0
        self.published_at: dict[int, int] = {}  # policy version -> learner updates when it was broadcast
        self.buffer: list[TrainBatch] = []
        fragment_steps = spec.rollouts.envs_per_worker * spec.rollouts.fragment_length
        self.fragments_per_batch = max(1, -(-p.train_batch_size // fragment_steps))
        self.sampler = FragmentQueue(
            self.worker_config(), PolicyHeadFactory(EncoderSpec.from_params(p)), spec.rollouts.workers,
            queue_size=max(p.learner_queue_size, self.fragments_per_batch), requests_per_worker=p.requests_per_worker,
        )
        self.sync_weights()

    # -- weights ---------------------------------------------------------------------------------
    def worker_weights(self) -> dict[str, np.ndarray]:
        return state_dict_to_numpy(self.model.policy)

    def evaluation_policy(self) -> tuple[PolicyHeadFactory, dict[str, np.ndarray]]:
        return self.sampler.workers.policy_factory, self.worker_weights()

    def sync_weights(self) -> None:
        self.policy_version += 1
        self.published_at[self.policy_version] = self.updates
        for old in [v for v in self.published_at if v < self.policy_version - 10_000]:
            del self.published_at[old]
        self.sampler.broadcast(self.worker_weights(), self.policy_version)
        self.sampler.sync_filter(self.obs_filter.get_state())

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> dict[str, Any]:
        p = self.params
        started = time.perf_counter()
        deadline = started + p.min_iteration_seconds
        env_steps, updates_before, waited = 0, self.updates, 0.0
        lags: list[int] = []
        lag_updates: list[int] = []
        depths: list[int] = []
        sums: dict[str, float] = {}
        while True:
            self._fill_buffer()
            idle = not self.buffer
            waiting = time.perf_counter()
            arrived = self.sampler.poll(timeout=0.05 if idle else 0.0)
            if idle:
                waited += time.perf_counter() - waiting
            for batch in arrived:
                env_steps += batch.env_steps
                self.obs_filter.apply_delta(batch.filter_delta)
                self.record_episodes(batch.episodes)
            depths.append(len(self.sampler.queue))
            self._fill_buffer()
            if self.buffer:
                batch = self.buffer[int(self.np_random.integers(len(self.buffer)))]
                lags.extend((self.policy_version - batch.versions).tolist())
                lag_updates.extend(self.updates - self.published_at.get(int(v), 0) for v in batch.versions)
                for key, value in self.update(batch.tensors).items():
                    sums[key] = sums.get(key, 0.0) + value
                batch.uses += 1
                if batch.uses >= p.batch_reuse:
                    self.buffer.remove(batch)
                if self.updates % p.broadcast_interval == 0:
                    self.sync_weights()
            if time.perf_counter() >= deadline and self.updates > updates_before:
                break
        elapsed = time.perf_counter() - started
        updates = self.updates - updates_before
        learner = {key: value / updates for key, value in sums.items()}
        learner.update(
            updates=updates, updatesTotal=self.updates, updatesPerSecond=updates / elapsed,
            lr=self.optimizer.param_groups[0]["lr"], waitSeconds=waited, bufferBatches=len(self.buffer),
            policyLagMean=float(np.mean(lags)), policyLagMax=int(np.max(lags)),
            policyLagUpdatesMean=float(np.mean(lag_updates)), policyLagUpdatesMax=int(np.max(lag_updates)),
        )
        return {
            "envSteps": env_steps,
            "learner": learner,
            "sampler": {
                "workerRestarts": self.sampler.restarts,
                "queueDepthMean": float(np.mean(depths)),
                "queueSize": self.sampler.queue_size,
                "backpressuredPolls": self.sampler.backpressured_polls,
                "envStepsPerSecond": env_steps / elapsed,
            },
        }

    def _fill_buffer(self) -> None:
        """Queued fragments into train batches while the buffer has room; the rest wait in the queue."""
        while len(self.buffer) < self.params.buffer_batches:
            fragments = self.sampler.take(self.fragments_per_batch)
            if not fragments:
                return
            self.buffer.append(self.train_batch(fragments))

    def train_batch(self, fragments: list[SampleBatch]) -> TrainBatch:
        """Fragments side by side along the env axis: [T, envs x fragments, ...] on the learner's device."""
        arrays = {key: np.concatenate([f.data[key] for f in fragments], axis=1) for key in BATCH_KEYS}
        # Where a trace stops (an episode's end, or a row that is no transition): once per batch, not per update.
        arrays["dones"] = arrays["terminateds"] | arrays["truncateds"] | ~arrays["valid"]
        return TrainBatch(to_device(arrays, self.device), np.array([f.policy_version for f in fragments]))

    # -- the update ------------------------------------------------------------------------------
    def autocast(self) -> Any:
        """Where the learner's forward passes run: under bfloat16 autocast when `spec.learner.bf16` asks for it
        (CUDA). What they give is cast back to float32 for the losses and V-trace."""
        return learner_autocast(self.device, self.spec.learner.bf16)

    def evaluate_batch(self, d: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The distribution inputs, log pi(a|s), entropy, V(s) and V(next_obs) of the current model."""
        T, B = d["rewards"].shape
        with self.autocast():
            inputs, values = self.model.evaluate(d["obs"].flatten(0, 1))
        inputs, values = inputs.float(), values.float().view(T, B)
        logp, entropy = self.model.policy.log_prob_entropy(inputs, d["actions"].flatten(0, 1))
        with torch.no_grad():
            reuse, compute = bootstrap_rows(d["terminateds"], d["dones"], d["valid"])
            computed = None
            if compute.any():
                with self.autocast():
                    computed = self.model.value(d["next_obs"][compute]).float()
            next_values = next_values_from(values.detach(), reuse, computed, compute)
        return inputs, logp.view(T, B), entropy.view(T, B), values, next_values

    def targets(self, target_logp: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                d: dict[str, torch.Tensor]) -> VTraceReturns:
        p = self.params
        return vtrace(d["logp"], target_logp.detach(), d["rewards"], values.detach(), next_values, d["terminateds"],
                      d["dones"], gamma=p.gamma, rho_bar=p.rho_bar, c_bar=p.c_bar, pg_rho_bar=p.pg_rho_bar)

    def loss(self, d: dict[str, torch.Tensor]) -> LossTerms:
        p = self.params
        _inputs, logp, entropy, values, next_values = self.evaluate_batch(d)
        targets = self.targets(logp, values, next_values, d)
        loss = impala_loss(logp, entropy, values, targets, d["valid"].float(), vf_coeff=p.vf_coeff,
                           entropy_coeff=p.entropy_coeff)
        loss.extra["meanRho"] = masked_mean(targets.rhos, d["valid"].float())
        return loss

    def update(self, d: dict[str, torch.Tensor]) -> dict[str, float]:
        p = self.params
        loss = self.loss(d)
        self.optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        if p.grad_clip is not None:
            for group in self.model.clip_groups():
                nn.utils.clip_grad_norm_(group, p.grad_clip, foreach=True)
        self.optimizer.step()
        self.updates += 1
        self.after_update()
        terms = {"policyLoss": loss.policy, "valueLoss": loss.value, "entropy": loss.entropy, **loss.extra}
        return {key: float(value.detach()) for key, value in terms.items()}

    def after_update(self) -> None:
        """Hook for subclasses (APPO's target policy)."""

    # -- acting and state ------------------------------------------------------------------------
    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            actions, _ = self.model.policy.sample(torch.as_tensor(obs, device=self.device), explore)
        return actions.cpu().numpy()

    def policy_module(self) -> nn.Module:
        return GreedyActor(copy.deepcopy(self.model.policy).cpu().eval())

    def learner_state(self) -> dict[str, bytes]:
        return {
            MODEL_FILE: torch_bytes(self.model.state_dict()),
            OPTIMIZER_FILE: torch_bytes(self.optimizer.state_dict()),
            LEARNER_FILE: json.dumps({"updates": self.updates}).encode(),
        }

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.model.load_state_dict(torch_load_bytes(files[MODEL_FILE], self.device))
        if OPTIMIZER_FILE in files:
            self.optimizer.load_state_dict(torch_load_bytes(files[OPTIMIZER_FILE], self.device))
        if LEARNER_FILE in files:
            self.updates = int(json.loads(files[LEARNER_FILE])["updates"])
        self.buffer.clear()  # batches of the run before: their lag no longer means anything

    def stop(self) -> None:
        self.sampler.stop()


__all__ = ["IMPALA", "IMPALAConfig", "impala_loss"]
