"""Where the learner runs: cuda when GPUs are asked for and visible, else the CPU with a warning; and whether it
runs under bfloat16 autocast there (`spec.learner.bf16`: auto, true or false)."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

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
    """bfloat16 autocast on the learner's device (CUDA or the CPU) where `bf16`, the resolved
    `spec.learner.bf16` (`learner_bf16`), is on; a no-op otherwise."""
    if bf16 is True and device.type in ("cuda", "cpu"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


Bf16Setting = bool | Literal["auto"]  # spec.learner.bf16


class _Bf16(TypedDict):
    setting: Bf16Setting
    device: str
    enabled: bool | None
    reason: str


class Bf16Record(_Bf16, total=False):
    """`spec.learner.bf16` as resolved, in the first results line's `defaults.machine.bf16` and the run record's
    `learner.bf16` (enabled None, no `native`: left to a learner on a GPU this process does not see)."""

    native: bool
CUDA_NATIVE_BF16 = (8, 0)  # compute capability from which a GPU computes bfloat16 itself (Ampere)
EMULATED_COST = ("bfloat16 autocast is emulated there, roughly an order of magnitude slower per minibatch than "
                 "float32 (a Nature-CNN PPO minibatch of 256 took 11x as long on an AVX2 CPU)")


@dataclass(frozen=True)
class Bf16Choice:
    """What `spec.learner.bf16` comes to on one device, and why."""

    setting: Bf16Setting
    device: str  # cpu, cuda
    enabled: bool
    native: bool  # the device computes bfloat16 itself
    reason: str
    warning: str | None = None  # bf16: true where it is emulated

    def record(self) -> Bf16Record:
        return {"setting": self.setting, "device": self.device, "enabled": self.enabled, "native": self.native,
                "reason": self.reason}


def resolve_bf16(setting: Bf16Setting, device_type: str, *, conv: bool = True, cpu_flags: Iterable[str] = (),
                 cuda_capability: tuple[int, int] | None = None) -> Bf16Choice:
    """`spec.learner.bf16` on a learner device (pure): auto is on for a conv encoder (`conv`) on a GPU of compute
    capability 8.0 or later and off on every CPU; true is on anywhere autocast exists, with a warning of the cost
    where it is emulated (a CPU without avx512_bf16 or amx_bf16 among its /proc/cpuinfo flags, an older GPU);
    false is off."""
    from kuberl.trainer.cpu import NATIVE_BF16_FLAGS, native_bf16_flags

    if device_type == "cpu":
        found = native_bf16_flags(cpu_flags)
        native = bool(found)
        why = (f"the CPU has {' and '.join(found)}" if found
               else f"the CPU has no native bfloat16 ({' or '.join(NATIVE_BF16_FLAGS)})")
    elif device_type == "cuda":
        native = cuda_capability is not None and tuple(cuda_capability) >= CUDA_NATIVE_BF16
        shown = ".".join(map(str, cuda_capability)) if cuda_capability else "unknown"
        why = f"the GPU's compute capability is {shown} ({'' if native else 'under '}8.0 for native bfloat16)"
    else:
        return Bf16Choice(setting, device_type, False, False, f"no bfloat16 autocast on {device_type}")
    if setting is False:
        return Bf16Choice(setting, device_type, False, native, "off: learner.bf16 is false")
    if setting == "auto" and not conv:
        # A vector task's small MLP gains nothing: the casts cost about what the bfloat16 matmuls save, and the
        # float32 defaults are the ones measured.
        return Bf16Choice(setting, device_type, False, native, "auto: off, no conv encoder to speed up")
    if setting == "auto" and device_type == "cpu":
        # Float32 on every CPU, so the default does not hang on one CPU's instruction set. Where bfloat16 is native
        # it steps PPO on Pong 1.3x faster but learns less per env step on some seeds: 18 on two seeds of three
        # within the hour, where float32 reached it on all three (docs/benchmarks.md, "Pong to 18 on 2 cores").
        return Bf16Choice(setting, device_type, False, native, f"auto: off on a CPU (float32), {why}")
    if setting == "auto":
        return Bf16Choice(setting, device_type, native, native, f"auto: {'on' if native else 'off'}, {why}")
    if native:
        return Bf16Choice(setting, device_type, True, True, f"on: learner.bf16 is true, {why}")
    warning = (f"spec.learner.bf16 is true but {why}: {EMULATED_COST}; "
               "set learner.bf16: auto (or false) to train in float32 here")
    return Bf16Choice(setting, device_type, True, False, f"on: learner.bf16 is true, emulated: {why}", warning)


def learner_bf16_choice(setting: Bf16Setting, device: torch.device, *, conv: bool) -> Bf16Choice:
    """`resolve_bf16` on this process's `device`, from its /proc/cpuinfo flags or its GPU's compute capability."""
    from kuberl.trainer.cpu import cpu_flags, read_cpuinfo

    if device.type == "cuda":
        return resolve_bf16(setting, "cuda", conv=conv, cuda_capability=torch.cuda.get_device_capability(device))
    return resolve_bf16(setting, device.type, conv=conv, cpu_flags=cpu_flags(read_cpuinfo()))


_warned: set[str] = set()


def has_conv(*modules: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for module in modules for m in module.modules())


def learner_bf16(setting: Bf16Setting, device: torch.device, *models: torch.nn.Module) -> bool:
    """Whether the learner of `models` on `device` trains under bfloat16 autocast (`spec.learner.bf16` resolved);
    warns once a process where true asks for an emulated autocast."""
    choice = learner_bf16_choice(setting, device, conv=has_conv(*models))
    if choice.warning and choice.warning not in _warned:
        _warned.add(choice.warning)
        warnings.warn(choice.warning, RuntimeWarning, stacklevel=2)
    return choice.enabled
