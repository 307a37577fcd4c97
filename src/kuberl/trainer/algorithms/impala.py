"""IMPALA (algorithm "impala", Espeholt et al. 2018): rollout workers that never wait for the learner, and a
learner that corrects for their policy lag with V-trace.

- Rollout workers (Ray actors, on the worker pods first) sample fragments continuously with the weights they
  hold and return them through a bounded queue (`kuberl.trainer.distributed.fragment_queue`).
- The learner (this process, on the GPU where `spec.learner.gpus` asks for one) assembles train batches
  of whole fragments, keeps `buffer_batches` of them and learns from each `batch_reuse` times; it waits
  for sampling only when it has nothing left to learn from. Every `broadcast_interval` updates it
  publishes its weights (one object-store put). That loop is `kuberl.trainer.algorithms.vtrace_loop`'s,
  which a multi-agent run's IMPALA and APPO run once per policy.
- Each update's batch carries the policy versions that sampled it: the lag (learner version - behaviour
  version, in broadcasts and in updates) is reported per iteration as mean and max.

The update (`VTraceLearner` with `impala_loss`: V-trace targets for the critic, the policy gradient with
V-trace advantages, an entropy bonus) reads top to bottom in `kuberl.trainer.learners.vtrace`; APPO
(`kuberl.trainer.algorithms.appo`) is the same algorithm with `appo_loss` and a target policy.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from kuberl.api.hyperparams import IMPALAParams
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.vtrace_loop import VTraceLoop, learn_for, vtrace_learner
from kuberl.trainer.distributed.fragment_queue import FragmentQueue
from kuberl.trainer.iteration_result import LearnerStats, StepResult
from kuberl.trainer.learners.vtrace import VTraceLearner
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.models.policy_value import PolicyValueNet
from kuberl.trainer.sampling.policies import PolicyHeadFactory


class IMPALAConfig(AlgorithmConfig):
    algorithm = "impala"

    def algorithm_class(self) -> type[IMPALA]:
        return IMPALA


class IMPALA(Algorithm):
    params: IMPALAParams
    sampler: FragmentQueue  # set by setup(), which construction runs

    def setup(self) -> None:
        p, spec = self.params, self.spec
        learner = vtrace_learner((self.observation_space, self.action_space), p, self.device, spec.learner.bf16)
        self.loop = VTraceLoop(learner, self.np_random)
        fragment_steps = spec.rollouts.envs_per_worker * spec.rollouts.fragment_length
        fragments_per_batch = max(1, -(-p.train_batch_size // fragment_steps))
        self.sampler = FragmentQueue(
            self.worker_config(), PolicyHeadFactory(EncoderSpec.from_params(p)), spec.rollouts.workers,
            queue_size=max(p.learner_queue_size, fragments_per_batch), requests_per_worker=p.requests_per_worker,
        )
        self.sync_weights()

    @property
    def learner(self) -> VTraceLearner:
        return self.loop.learner

    @property
    def model(self) -> PolicyValueNet:
        return self.learner.model

    @property
    def updates(self) -> int:
        return self.learner.updates

    # -- weights ---------------------------------------------------------------------------------
    def worker_weights(self) -> dict[str, np.ndarray]:
        return self.loop.worker_weights()

    def sync_weights(self) -> None:
        """Publish the weights (every `broadcast_interval` updates), noting the learner's updates at that version
        so that each batch's policy lag can be counted in updates too, and send the filter with them."""
        super().sync_weights()
        self.loop.published(self.policy_version)
        self.sampler.sync_filter(self.obs_filter.get_state())

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> StepResult:
        self.anneal(self.learner)
        iteration = learn_for(self, [self.loop], lambda fragment: [(self.loop, fragment)],
                              self.params.min_iteration_seconds)
        env_steps, depths, elapsed = sum(f.env_steps for f in iteration.fragments), iteration.depths, iteration.seconds
        learner = self.loop.statistics(iteration)
        assert learner is not None  # learn_for returns once the loop has learnt
        return StepResult(env_steps, learner=LearnerStats(learner), sampler={
            "workerRestarts": self.sampler.restarts,
            "queueDepthMean": float(np.mean(depths)),
            "queueSize": self.sampler.queue_size,
            "backpressuredPolls": self.sampler.backpressured_polls,
            "envStepsPerSecond": env_steps / elapsed,
        })

    # -- acting and state ------------------------------------------------------------------------
    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        return self.loop.compute_actions(obs, explore)

    def policy_module(self) -> nn.Module:
        return self.loop.policy_module()

    def learner_state(self) -> dict[str, bytes]:
        return self.loop.state_files()

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        self.loop.load_state_files(files)

    def stop(self) -> None:
        self.sampler.stop()


__all__ = ["IMPALA", "IMPALAConfig"]
