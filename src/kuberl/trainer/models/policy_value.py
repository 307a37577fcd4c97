"""IMPALA's and APPO's network: a policy head and a value head, each on an encoder from the models factory.

Discrete actions get Categorical logits; Box actions a Gaussian with a state-independent log-std (the
env clips what it is given). On vectors the actor and the critic have separate encoders: steadier on small
control tasks, and clipping each one's gradient norm on its own never lets the value loss shrink the policy's
step. On images the value head sits on the policy's conv encoder, as in the IMPALA paper (and PPO's model
here): one encoder pass gives both heads, which halves the learner's work.
"""

from __future__ import annotations

import contextlib

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from kuberl.trainer.models.actor_critic import Autocast, encode, log_prob_entropy
from kuberl.trainer.models.encoders import EncoderSpec, build_encoder, is_image_space
from kuberl.trainer.models.mlp import layer


class PolicyHead(nn.Module):
    """Encoder + the action distribution's inputs."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, encoder: EncoderSpec):
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        n_out = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) \
            else int(np.prod(action_space.shape or ()))
        self.encoder = build_encoder(observation_space, encoder)
        self.out = layer(self.encoder.out_features, n_out, 0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(n_out))

    def forward(self, obs: torch.Tensor, autocast: Autocast = contextlib.nullcontext) -> torch.Tensor:
        """The distribution's inputs; `autocast` covers the encoder only (see `PolicyValueNet.evaluate`)."""
        return self.out(encode(self.encoder, obs, autocast))

    def distribution(self, inputs: torch.Tensor) -> Distribution:
        if self.discrete:
            return Categorical(logits=inputs)
        return Normal(inputs, self.log_std.exp().expand_as(inputs))

    def log_prob_entropy(self, inputs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a|s) and the entropy, from the distribution's inputs."""
        return log_prob_entropy(inputs, actions, None if self.discrete else self.log_std)

    def sample(self, obs: torch.Tensor, explore: bool = True,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions and their log-probabilities; without exploration the mode. With `generator` the draw comes
        from it (a rollout worker's own noise), else from torch's global generator."""
        inputs = self(obs)
        if not explore:
            actions = self.mode(inputs)
        elif generator is None:
            actions = self.distribution(inputs).sample()
        elif self.discrete:
            actions = torch.multinomial(torch.softmax(inputs, dim=-1), 1, generator=generator).squeeze(-1)
        else:
            noise = torch.randn(inputs.shape, generator=generator, dtype=inputs.dtype, device=inputs.device)
            actions = inputs + self.log_std.exp() * noise
        logp, _ = self.log_prob_entropy(inputs, actions)
        return actions, logp

    def mode(self, inputs: torch.Tensor) -> torch.Tensor:
        """The most likely action: argmax of the logits (Discrete), the Gaussian's mean (Box)."""
        return inputs.argmax(-1) if self.discrete else inputs

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mode(self(obs))


class PolicyValueNet(nn.Module):
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, encoder: EncoderSpec):
        super().__init__()
        self.policy = PolicyHead(observation_space, action_space, encoder)
        self.shared = is_image_space(observation_space)
        self.critic_encoder = None if self.shared else build_encoder(observation_space, encoder)
        self.critic_out = layer(self.policy.encoder.out_features, 1, 1.0)

    def value(self, obs: torch.Tensor, autocast: Autocast = contextlib.nullcontext) -> torch.Tensor:
        encoder = self.policy.encoder if self.critic_encoder is None else self.critic_encoder  # None: shared
        return self.critic_out(encode(encoder, obs, autocast)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, autocast: Autocast = contextlib.nullcontext
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """The action distribution's inputs and V(s), with one encoder pass where the encoder is shared.

        `autocast` (the learner's bfloat16, `spec.learner.bf16`) covers the encoders only: the heads run in
        float32, as PPO's (`ActorCritic.evaluate` says why)."""
        if not self.shared:
            return self.policy(obs, autocast), self.value(obs, autocast)
        features = encode(self.policy.encoder, obs, autocast)
        return self.policy.out(features), self.critic_out(features).squeeze(-1)

    def clip_groups(self) -> list[list[nn.Parameter]]:
        """The parameter groups whose gradient norms are clipped one by one: actor and critic apart, or together
        where they share the encoder."""
        if self.critic_encoder is None:  # shared
            return [list(self.parameters())]
        critic = [*self.critic_encoder.parameters(), *self.critic_out.parameters()]
        return [list(self.policy.parameters()), critic]
