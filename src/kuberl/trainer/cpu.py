"""This machine's CPU from /proc/cpuinfo: its model and whether it has native bfloat16 instructions.

bfloat16 autocast on a CPU is fast only where the CPU computes bfloat16 itself (AVX-512 BF16, or AMX on newer
Xeons). Elsewhere oneDNN emulates it: measured on an AVX2 AMD EPYC, a Nature-CNN PPO minibatch of 256 took about
11x as long under bfloat16 autocast as in float32. The parsers are pure; `read_cpuinfo` reads the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import TypedDict

# /proc/cpuinfo flags of x86 CPUs that compute bfloat16 natively: AVX-512 BF16 (Cooper Lake, Zen 4 and later)
# and AMX's bfloat16 tiles (Sapphire Rapids and later).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# The flags a benchmark row names: what decides the speed of a conv learner's float32 and bfloat16 passes.
SPEED_FLAGS = ("avx2", "avx512f", *NATIVE_BF16_FLAGS)


def cpu_model(cpuinfo: str) -> str | None:
    """The CPU's model name from /proc/cpuinfo's text (x86 "model name", ARM "Model"/"Hardware")."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return None


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The first processor's feature flags from /proc/cpuinfo's text (x86 "flags", ARM "Features")."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def native_bf16_flags(flags: Iterable[str]) -> list[str]:
    """The flags among `flags` that mean native bfloat16 (empty: autocast would be emulated)."""
    present = set(flags)
    return [flag for flag in NATIVE_BF16_FLAGS if flag in present]


@cache
def read_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    """/proc/cpuinfo's text, read once per process; empty where there is none (not Linux)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


class CpuSummary(TypedDict):
    """A benchmark row's CPU (its keys are the rows' own)."""

    cpu_model: str | None
    cpu_bf16: bool  # native bfloat16
    cpu_flags: list[str]  # SPEED_FLAGS present


def cpu_summary(cpuinfo: str | None = None) -> CpuSummary:
    """A benchmark row's CPU: `cpu_model`, `cpu_bf16` (native bfloat16 or not) and `cpu_flags` (SPEED_FLAGS
    present), from /proc/cpuinfo's text (this machine's when None)."""
    import platform

    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    flags = cpu_flags(text)
    return {"cpu_model": cpu_model(text) or platform.processor() or None,
            "cpu_bf16": bool(native_bf16_flags(flags)),
            "cpu_flags": [flag for flag in SPEED_FLAGS if flag in flags]}


def cpu_caption(cpu: CpuSummary | None = None) -> str:
    """A printed table's or a plot's line naming the CPU (this machine's when None): its model and whether it
    computes bfloat16 natively."""
    cpu = cpu_summary() if cpu is None else cpu
    return f"CPU {cpu['cpu_model']}, native bfloat16: {'yes' if cpu['cpu_bf16'] else 'no'}"
