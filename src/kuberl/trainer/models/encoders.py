"""Encoders: observations to features. A conv stack for images, an MLP body for vectors.

An image is a uint8 Box of rank 3, [C, H, W] (stacked frames) or [H, W, C] (an RGB screen), or of
rank 2 [H, W]. It stays uint8 until it is a tensor on the device that computes with it; the
encoder scales it there (x / 255), whatever dtype it arrives in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from kuberl.api.hyperparams import NATURE_CONV, CommonParams
from kuberl.trainer.models.image_shapes import (
    ImageLayoutError,
    channels_last,
    chw,
    conv_output_shape,
    is_image_space,
)
from kuberl.trainer.models.mlp import hidden_layers, layer, obs_size

__all__ = ["ConvEncoder", "EncoderSpec", "ImageLayoutError", "VectorEncoder", "build_encoder", "channels_last", "chw",
           "conv_output_shape", "is_image_space", "linear_head"]

class ConvEncoder(nn.Module):
    """Conv + ReLU layers, flattened, then dense ReLU layers (the Nature DQN torso by default)."""

    def __init__(self, space: gym.Space, conv: Sequence[Sequence[int]], hidden: Sequence[int]):
        super().__init__()
        self.shape = tuple(space.shape or ())
        self.channels_last = channels_last(self.shape)
        in_channels = chw(self.shape)[0]
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in conv:
            conv_layer = nn.Conv2d(in_channels, out_channels, kernel, stride)
            nn.init.orthogonal_(conv_layer.weight, np.sqrt(2))
            if conv_layer.bias is not None:
                nn.init.zeros_(conv_layer.bias)
            layers += [conv_layer, nn.ReLU()]
            in_channels = out_channels
        # Convolutions run in the channels-last memory layout (the same NCHW tensors, strided NHWC): oneDNN's
        # kernels for it train the Nature CNN about 2x faster on a CPU. Flatten still reads C, H, W in order,
        # so weights and checkpoints do not depend on the layout.
        self.conv = nn.Sequential(*layers, nn.Flatten()).to(  # type: ignore[call-overload]  # torch's stub lacks it
            memory_format=torch.channels_last)
        size = int(np.prod(conv_output_shape(space, conv)))
        dense, self.out_features = hidden_layers(size, hidden, "relu")
        self.dense = nn.Sequential(*dense)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs
        if len(self.shape) == 2:
            x = x.unsqueeze(-3)
        elif self.channels_last:
            x = x.permute(0, 3, 1, 2)
        # The layout change on the uint8 frames, then one conversion straight to the dtype the convolutions
        # compute in (bfloat16 under the learner's autocast) and an in-place scale: a quarter of the memory
        # traffic of scaling in float32 first (measured: PPO on Pong spent 16% of its iteration here).
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32
        x = x.contiguous(memory_format=torch.channels_last).to(dtype, copy=True).mul_(1.0 / 255.0)
        return self.dense(self.conv(x))


@dataclass(frozen=True)
class EncoderSpec:
    """How to build an encoder, in a picklable form (it travels to rollout workers)."""

    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    conv: tuple[tuple[int, int, int], ...] = tuple(tuple(layer) for layer in NATURE_CONV)  # type: ignore[misc]
    conv_hidden: tuple[int, ...] = (512,)

    @classmethod
    def from_params(cls, params: CommonParams) -> EncoderSpec:
        return cls(tuple(params.hidden), params.activation,
                   tuple((c, k, s) for c, k, s in params.model.conv), tuple(params.model.hidden))


class VectorEncoder(nn.Module):
    """Flattens a vector observation and runs the MLP body."""

    def __init__(self, space: gym.Space, hidden: Sequence[int], activation: str):
        super().__init__()
        layers, self.out_features = hidden_layers(obs_size(space), hidden, activation)
        self.body = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.body(obs.float().flatten(1))


def build_encoder(space: gym.Space, spec: EncoderSpec) -> ConvEncoder | VectorEncoder:
    """A conv encoder for image observations, an MLP body for vectors; `.out_features` is its width."""
    if is_image_space(space):
        return ConvEncoder(space, spec.conv, spec.conv_hidden)
    return VectorEncoder(space, spec.hidden, spec.activation)


def linear_head(in_features: int, out_features: int, gain: float) -> nn.Linear:
    return layer(in_features, out_features, gain)
