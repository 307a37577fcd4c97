"""Moving weights and state between torch, numpy and bytes."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch
from torch import nn


def state_dict_to_numpy(module: nn.Module) -> dict[str, np.ndarray]:
    """Weights as CPU numpy arrays: cheap to pickle and to put into Ray's object store."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_weights(module: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Load numpy weights; copies, since arrays from Ray's object store are read-only. (Into the module's own
    tensors, so each keeps its memory layout: conv weights stay channels-last.)"""
    module.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})


def torch_bytes(obj: Any) -> bytes:
    """`torch.save` into bytes (state dicts, optimizer state, RNG state)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def torch_load_bytes(data: bytes, device: torch.device | str = "cpu") -> Any:
    return torch.load(io.BytesIO(data), map_location=device, weights_only=True)
