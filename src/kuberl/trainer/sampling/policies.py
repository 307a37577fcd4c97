"""The policies rollout workers run: PPO's actor (in numpy for vectors, in torch for images), epsilon-greedy over a Q-network, IMPALA's policy head and SAC's squashed Gaussian actor.

Each is built in the worker by a picklable factory, (observation_space, action_space, seed) -> policy,
and loads the numpy weights the learner publishes. Each draws its noise from generators of its own, seeded with
the worker's seed, never from torch's or numpy's global one: a worker in the learner's process shares those
with the learner, and rollout workers must not share their noise with each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import gymnasium as gym
import numpy as np
import torch

from kuberl.api.hyperparams import CommonParams, DQNParams
from kuberl.trainer.learning.device import configure_cpu_threads, obs_tensor
from kuberl.trainer.models.actor_critic import Actor
from kuberl.trainer.models.encoders import EncoderSpec, is_image_space
from kuberl.trainer.models.numpy_mlp import NumpyMLP
from kuberl.trainer.models.policy_value import PolicyHead
from kuberl.trainer.models.q_network import QNetwork, q_network
from kuberl.trainer.models.sac_networks import SquashedGaussianActor
from kuberl.trainer.models.weights import load_weights

Network = TypeVar("Network", bound=torch.nn.Module)


def seeded_init(seed: int, build: Callable[[], Network]) -> Network:
    """`build()`'s network initialised from `seed`, leaving torch's global generator as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


class PPOSamplingPolicy:
    """The actor in numpy, for rollout workers: samples actions and returns their log-probabilities."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int, *, activation: str):
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.net = NumpyMLP(activation)
        self.log_std: np.ndarray | None = None
        self.rng = np.random.default_rng(seed)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.net.load(weights, prefix="net.")
        if not self.discrete:
            self.log_std = weights["log_std"].astype(np.float32)

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        out = self.net(obs)
        if self.discrete:
            logits = out - out.max(axis=1, keepdims=True)
            log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
            if explore:
                # Gumbel-max: one vectorised draw from each row's categorical distribution.
                actions = (log_probs - np.log(-np.log(self.rng.random(log_probs.shape)))).argmax(axis=1)
            else:
                actions = log_probs.argmax(axis=1)
            logp = log_probs[np.arange(len(actions)), actions]
            return actions.astype(np.int64), {"logp": logp.astype(np.float32)}
        assert self.log_std is not None
        std = np.exp(self.log_std)
        noise = self.rng.standard_normal(out.shape).astype(np.float32) if explore else np.zeros_like(out)
        actions = out + std * noise
        logp = (-0.5 * noise**2 - self.log_std - 0.5 * np.log(2 * np.pi)).sum(axis=1)
        return actions.astype(np.float32), {"logp": logp.astype(np.float32)}


class TorchPPOPolicy:
    """The actor in torch, for image observations (a conv net is no job for numpy): on the CPU in rollout
    worker actors, on the learner's GPU when sampling runs in the learner's process."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int, *, encoder: EncoderSpec,
                 device: str = "cpu"):
        configure_cpu_threads()  # in a Ray actor too: many small conv calls run fastest on one thread
        self.device = torch.device(device)
        self.actor = seeded_init(seed, lambda: Actor(observation_space, action_space, encoder.hidden,
                                                     encoder.activation, encoder))
        self.actor = self.actor.to(self.device).eval()
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        load_weights(self.actor, weights)

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with torch.no_grad():
            out = self.actor.outputs(obs_tensor(obs, self.device))
            if self.actor.discrete:
                log_probs = torch.log_softmax(out, dim=-1)
                if explore:
                    actions = torch.multinomial(log_probs.exp(), 1, generator=self.generator).squeeze(-1)
                else:
                    actions = log_probs.argmax(-1)
                logp = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            else:
                std = self.actor.log_std.exp()
                noise = (torch.randn(out.shape, generator=self.generator, device=self.device) if explore
                         else torch.zeros_like(out))
                actions = out + std * noise
                logp, _ = self.actor.log_prob_entropy_of(out, actions)
        dtype = np.int64 if self.actor.discrete else np.float32
        return actions.cpu().numpy().astype(dtype), {"logp": logp.cpu().numpy().astype(np.float32)}


@dataclass(frozen=True)
class PPOPolicyFactory:
    """Builds a worker's PPO policy: numpy for vector observations, torch (on `device`) for images;
    pickles to Ray actors."""

    encoder: EncoderSpec
    device: str = "cpu"

    @classmethod
    def from_params(cls, params: CommonParams, device: str = "cpu") -> PPOPolicyFactory:
        return cls(EncoderSpec.from_params(params), device)

    def __call__(self, observation_space: gym.Space, action_space: gym.Space,
                 seed: int) -> PPOSamplingPolicy | TorchPPOPolicy:
        if is_image_space(observation_space):
            return TorchPPOPolicy(observation_space, action_space, seed, encoder=self.encoder, device=self.device)
        return PPOSamplingPolicy(observation_space, action_space, seed, activation=self.encoder.activation)


class QPolicy:
    """Epsilon-greedy over a CPU copy of the Q-network; keeps Q(s, a) of the action taken and max_a Q(s, a) of
    each step for local priorities (`replay.nstep.batch_priorities`)."""

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
            return self.network(obs_tensor(obs)).numpy()

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        q = self.q_values(obs)
        actions = q.argmax(axis=1)
        if explore and self.epsilon > 0:
            random = self.rng.random(len(actions)) < self.epsilon
            actions = np.where(random, self.rng.integers(0, self.n_actions, len(actions)), actions)
        q_taken = np.take_along_axis(q, actions[:, None], axis=1)[:, 0].astype(np.float32)
        return actions.astype(np.int64), {"q_taken": q_taken, "q_max": q.max(axis=1).astype(np.float32)}


@dataclass(frozen=True)
class QPolicyFactory:
    """Builds a worker's QPolicy; a plain dataclass so that it pickles to Ray actors."""

    encoder: EncoderSpec
    dueling: bool

    @classmethod
    def from_params(cls, params: DQNParams) -> QPolicyFactory:
        return cls(EncoderSpec.from_params(params), params.dueling)

    def __call__(self, observation_space: gym.Space, action_space: gym.Space, seed: int) -> QPolicy:
        network = seeded_init(seed, lambda: q_network(observation_space, action_space, self.encoder, self.dueling))
        assert isinstance(action_space, gym.spaces.Discrete)  # q_network refuses any other
        return QPolicy(network, int(action_space.n), seed)


class PolicyHeadSampler:
    """IMPALA's and APPO's behaviour policy: a CPU copy of the learner's PolicyHead; keeps each action's log-prob."""

    def __init__(self, head: PolicyHead, seed: int):
        self.head = head.eval()
        self.generator = torch.Generator().manual_seed(seed)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        load_weights(self.head, weights)

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with torch.no_grad():
            actions, logp = self.head.sample(torch.as_tensor(obs), explore, self.generator)
        return actions.numpy(), {"logp": logp.numpy().astype(np.float32)}


@dataclass(frozen=True)
class PolicyHeadFactory:
    """Builds a worker's PolicyHeadSampler; a plain dataclass so that it pickles to Ray actors."""

    encoder: EncoderSpec

    def __call__(self, observation_space: gym.Space, action_space: gym.Space, seed: int) -> PolicyHeadSampler:
        configure_cpu_threads()
        return PolicyHeadSampler(seeded_init(seed, lambda: PolicyHead(observation_space, action_space, self.encoder)),
                                 seed)


class SACSamplingPolicy:
    """SAC's actor on the CPU: sampled squashed actions while training, the squashed mean when not exploring,
    and uniform actions in the Box until the learner starts (`configure(uniform=...)`)."""

    def __init__(self, actor: SquashedGaussianActor, action_space: gym.spaces.Box, seed: int):
        self.actor = actor.eval()
        self.low = action_space.low.astype(np.float32)
        self.high = action_space.high.astype(np.float32)
        self.uniform = False
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(seed)

    def configure(self, uniform: bool | None = None) -> None:
        if uniform is not None:
            self.uniform = bool(uniform)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        load_weights(self.actor, weights)

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if explore and self.uniform:
            shape = (len(obs), *self.low.shape)
            return self.rng.uniform(self.low, self.high, shape).astype(np.float32), {}
        with torch.no_grad():
            obs_t = obs_tensor(obs)
            actions = self.actor.sample(obs_t, self.generator)[0] if explore else self.actor.greedy(obs_t)
        return actions.numpy().reshape(len(obs), *self.low.shape), {}


@dataclass(frozen=True)
class SACPolicyFactory:
    """Builds a worker's SACSamplingPolicy; a plain dataclass so that it pickles to Ray actors."""

    encoder: EncoderSpec

    def __call__(self, observation_space: gym.Space, action_space: gym.Space, seed: int) -> SACSamplingPolicy:
        configure_cpu_threads()
        actor = seeded_init(seed, lambda: SquashedGaussianActor(observation_space, action_space, self.encoder))
        assert isinstance(action_space, gym.spaces.Box)  # the actor refuses any other
        return SACSamplingPolicy(actor, action_space, seed)
