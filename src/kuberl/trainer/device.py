"""Where the learner runs: cuda when GPUs are asked for and visible, else the CPU with a warning."""

from __future__ import annotations

import warnings

import torch


def learner_device(gpus: int) -> torch.device:
    if gpus <= 0:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    warnings.warn(
        f"spec.learner.gpus is {gpus} but no CUDA GPU is visible to torch; the learner runs on the CPU",
        RuntimeWarning,
        stacklevel=2,
    )
    return torch.device("cpu")
