"""A numpy forward pass of `mlp()`, for rollout workers."""

from __future__ import annotations

import numpy as np


class NumpyMLP:
    """Inference of an `mlp()` in numpy.

    Rollout workers step small batches (8-64 envs); for networks this size a
    numpy forward pass is several times faster than torch's per-call overhead.
    """

    def __init__(self, activation: str):
        self.activation = np.tanh if activation == "tanh" else (lambda x: np.maximum(x, 0.0))
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []

    def load(self, weights: dict[str, np.ndarray], prefix: str = "") -> None:
        """Take the Linear layers of `mlp()` weights named `{prefix}{index}.weight` / `.bias`, in order."""
        indices = sorted(
            int(key[len(prefix):].split(".")[0])
            for key in weights
            if key.startswith(prefix) and key.endswith(".weight") and key[len(prefix):].split(".")[0].isdigit()
        )
        self.layers = [
            (weights[f"{prefix}{i}.weight"].T.astype(np.float32), weights[f"{prefix}{i}.bias"].astype(np.float32))
            for i in indices
        ]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = x.reshape(len(x), -1)  # a vector observation of any rank, flattened as the torch nets do
        for i, (weight, bias) in enumerate(self.layers):
            x = x @ weight + bias
            if i < len(self.layers) - 1:
                x = self.activation(x)
        return x
