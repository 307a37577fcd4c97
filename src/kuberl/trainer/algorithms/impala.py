"""IMPALA (algorithm "impala", Espeholt et al. 2018): rollout workers that never wait for the learner, and a
learner that corrects for their policy lag with V-trace.

- Rollout workers (Ray actors, on the worker pods first) sample fragments continuously with the weights they
  hold and return them through a bounded queue (`kuberl.trainer.distributed.fragment_queue`).
- The learner (this process, on the GPU where `spec.learner.gpus` asks for one) assembles train batches
  of whole fragments, keeps `buffer_batches` of them and learns from each `batch_reuse` times; it waits
  for sampling only when it has nothing left to learn from. Every `broadcast_interval` updates it
  publishes its weights (one object-store put).
- Each update's batch carries the policy versions that sampled it: the lag (learner version - behaviour
  version, in broadcasts and in updates) is reported per iteration as mean and max.

The update (`VTraceLearner` with `impala_loss`: V-trace targets for the critic, the policy gradient with
V-trace advantages, an entropy bonus) reads top to bottom in `kuberl.trainer.learners.vtrace`; APPO
(`kuberl.trainer.algorithms.appo`) is the same algorithm with `appo_loss` and a target policy.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import IMPALAParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.distributed.fragment_queue import FragmentQueue
from kuberl.trainer.iteration_result import LearnerStats, StepResult
from kuberl.trainer.learners.vtrace import VTraceLearner, impala_loss
from kuberl.trainer.learning.device import to_device
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.greedy import GreedyActor
from kuberl.trainer.models.policy_value import PolicyValueNet
from kuberl.trainer.models.weights import state_dict_to_numpy
from kuberl.trainer.sampling.policies import PolicyHeadFactory
from kuberl.trainer.sampling.rollout_worker import SampleBatch

BATCH_KEYS = ("obs", "next_obs", "actions", "rewards", "terminateds", "truncateds", "valid", "logp")


class IMPALAConfig(AlgorithmConfig):
    algorithm = "impala"

    def algorithm_class(self) -> type[IMPALA]:
        return IMPALA


@dataclass(eq=False)
class TrainBatch:
    tensors: dict[str, torch.Tensor]  # time-major [T, B, ...]
    versions: np.ndarray  # the policy version that sampled each fragment
    uses: int = 0


class IMPALA(Algorithm):
    params: IMPALAParams

    def setup(self) -> None:
        p, spec = self.params, self.spec
        model = PolicyValueNet(self.observation_space, self.action_space, EncoderSpec.from_params(p))
        self.learner = self.make_learner(model)
        self.published_at: dict[int, int] = {}  # policy version -> learner updates when it was broadcast
        self.buffer: list[TrainBatch] = []
        fragment_steps = spec.rollouts.envs_per_worker * spec.rollouts.fragment_length
        self.fragments_per_batch = max(1, -(-p.train_batch_size // fragment_steps))
        self.sampler = FragmentQueue(
            self.worker_config(), PolicyHeadFactory(EncoderSpec.from_params(p)), spec.rollouts.workers,
            queue_size=max(p.learner_queue_size, self.fragments_per_batch), requests_per_worker=p.requests_per_worker,
        )
        self.sync_weights()

    def make_learner(self, model: PolicyValueNet) -> VTraceLearner:
        return VTraceLearner(model, self.params, self.device, loss=impala_loss, bf16=self.spec.learner.bf16)

    @property
    def model(self) -> PolicyValueNet:
        return self.learner.model

    @property
    def updates(self) -> int:
        return self.learner.updates

    # -- weights ---------------------------------------------------------------------------------
    def worker_weights(self) -> dict[str, np.ndarray]:
        return state_dict_to_numpy(self.model.policy)

    def sync_weights(self) -> None:
        """Publish the weights (every `broadcast_interval` updates), noting the learner's updates at that version
        so that each batch's policy lag can be counted in updates too, and send the filter with them."""
        super().sync_weights()
        self.published_at[self.policy_version] = self.updates
        for old in [v for v in self.published_at if v < self.policy_version - 10_000]:
            del self.published_at[old]
        self.sampler.sync_filter(self.obs_filter.get_state())

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> StepResult:
        p = self.params
        self.anneal(self.learner)
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
                for key, value in self.learner.update(batch.tensors).items():
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
            lr=self.learner.optimizer.param_groups[0]["lr"], waitSeconds=waited, bufferBatches=len(self.buffer),
            policyLagMean=float(np.mean(lags)), policyLagMax=int(np.max(lags)),
            policyLagUpdatesMean=float(np.mean(lag_updates)), policyLagUpdatesMax=int(np.max(lag_updates)),
        )
        return StepResult(env_steps, learner=LearnerStats(learner), sampler={
            "workerRestarts": self.sampler.restarts,
            "queueDepthMean": float(np.mean(depths)),
            "queueSize": self.sampler.queue_size,
            "backpressuredPolls": self.sampler.backpressured_polls,
            "envStepsPerSecond": env_steps / elapsed,
        })

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

    # -- acting and state ------------------------------------------------------------------------
    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        with torch.no_grad():
            actions, _ = self.model.policy.sample(torch.as_tensor(obs, device=self.device), explore)
        return actions.cpu().numpy()

    def policy_module(self) -> nn.Module:
        return GreedyActor(copy.deepcopy(self.model.policy).cpu().eval())

    def learner_state(self) -> dict[str, bytes]:
        return self.learner.state_files()

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.learner.load_state_files(files)
        self.buffer.clear()  # batches of the run before: their lag no longer means anything

    def stop(self) -> None:
        self.sampler.stop()


__all__ = ["IMPALA", "IMPALAConfig"]
