"""Where the learner runs: cuda when GPUs are asked for and visible, else the CPU with a warning."""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any

import numpy as np
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

    The one place the thread count is set: every process that runs torch calls it
    (the algorithm's, and each Ape-X worker and learner actor). kuberl's networks are
    small: one thread is fastest, and with several threads a busy machine makes each
    tiny op wait for all of them (measured: 12x slower PPO on a loaded 2-core machine;
    8,000 DQN steps took 16 s with one thread, 295 s with two).
    """
    threads = max(1, int(os.environ.get("KUBERL_TORCH_THREADS", "1")))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def to_device(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """numpy -> torch on `device`; on a GPU through pinned memory with non-blocking copies."""
    # Arrays from Ray's object store are read-only views; torch wants memory it may write.
    tensors = {k: torch.from_numpy(v if v.flags.writeable and v.flags.c_contiguous else np.array(v))
               for k, v in batch.items()}
    if device.type == "cpu":
        return tensors
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in tensors.items()}


def obs_tensor(obs: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
    """Observations as a tensor on `device`: images stay uint8 (the encoder scales them there), others float32."""
    array = np.asarray(obs)
    dtype = torch.uint8 if array.dtype == np.uint8 else torch.float32
    return torch.as_tensor(array, dtype=dtype, device=device)


def learner_autocast(device: torch.device, bf16: bool) -> Any:
    """bfloat16 autocast on CUDA when `spec.learner.bf16` asks for it; a no-op otherwise."""
    if bf16 and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
