"""Where the learner runs: cuda when GPUs are asked for and visible, else the CPU with a warning."""

from __future__ import annotations

import os
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


def configure_cpu_threads() -> int:
    """Intra-op threads for torch on the CPU: $KUBERL_TORCH_THREADS, default 1.

    kuberl's networks are small: one thread is fastest, and with several
    threads a busy machine makes each tiny op wait for all of them (measured:
    12x slower PPO on a loaded 2-core machine).
    """
    threads = max(1, int(os.environ.get("KUBERL_TORCH_THREADS", "1")))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
