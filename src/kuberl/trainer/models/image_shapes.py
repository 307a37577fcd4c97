"""What an image observation is, and the shape a conv stack makes of it; no torch, so env checks stay light."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

CHANNELS_LAST = (1, 3, 4)  # a last axis this size, after a larger one, is colour (or a stack) channels


class ImageLayoutError(ValueError):
    """The conv stack does not fit the image (it shrinks it to nothing)."""


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def channels_last(shape: Sequence[int]) -> bool:
    return len(shape) == 3 and shape[-1] in CHANNELS_LAST and shape[0] > shape[-1]


def chw(shape: Sequence[int]) -> tuple[int, int, int]:
    """The image's shape as [C, H, W]."""
    if len(shape) == 2:
        return 1, int(shape[0]), int(shape[1])
    if channels_last(shape):
        return int(shape[2]), int(shape[0]), int(shape[1])
    return int(shape[0]), int(shape[1]), int(shape[2])


def conv_output_shape(space: gym.Space, conv: Sequence[Sequence[int]]) -> tuple[int, int, int]:
    """[C, H, W] after the conv stack (no padding); raises ImageLayoutError when it does not fit."""
    shape = space.shape or ()
    channels, height, width = chw(shape)
    for index, (out_channels, kernel, stride) in enumerate(conv):
        if kernel > height or kernel > width:
            raise ImageLayoutError(f"layer {index} (kernel {kernel}) does not fit the {height}x{width} it gets "
                                   f"from a {'x'.join(map(str, shape))} image; use smaller kernels or strides")
        height, width, channels = (height - kernel) // stride + 1, (width - kernel) // stride + 1, out_channels
    return channels, height, width
