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


_chosen_threads: int | None = None  # spec.learner.threads, once the learner's process has read it


def configure_cpu_threads(threads: int | None = None) -> int:
    """Intra-op threads for torch on the CPU: `threads` (spec.learner.threads, in the learner's process), else
    what this process chose before, else $KUBERL_TORCH_THREADS, default 1.

    The one place the thread count is set: every process that runs torch calls it
    (the algorithm's, and each Ape-X worker and learner actor). kuberl's networks are
    small: one thread is fastest, and with several threads a busy machine makes each
    tiny op wait for all of them (measured: 12x slower PPO on a loaded 2-core machine;
    8,000 DQN steps took 16 s with one thread, 295 s with two). A conv learner with the
    machine to itself is the exception (spec.learner.threads): PPO on Pong from pixels on
    an idle 2-core machine learns about 1.5x faster per second on both cores.
    """
    global _chosen_threads
    if threads is not None:
        _chosen_threads = max(1, threads)
    chosen = _chosen_threads or max(1, int(os.environ.get("KUBERL_TORCH_THREADS", "1")))
    if torch.get_num_threads() != chosen:
        torch.set_num_threads(chosen)
    return chosen


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
    """bfloat16 autocast on the learner's device (CUDA, or a CPU with bfloat16 instructions such as avx512_bf16
    or AMX) when `spec.learner.bf16` asks for it; a no-op otherwise."""
    if bf16 and device.type in ("cuda", "cpu"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
