"""Every benchmark's figures name the CPU they were measured on: its model and whether it computes bfloat16
natively (kuberl.trainer.cpu), RLlib's too, read on kuberl's side of the run."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from bench.rllib_runner import RLlibRun, run_rllib

from kuberl.trainer.cpu import cpu_caption, cpu_summary

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_a_caption_names_the_model_and_native_bfloat16():
    avx2 = cpu_summary("model name\t: AMD EPYC 7B13\nflags\t\t: avx avx2\n")
    zen4 = cpu_summary("model name\t: AMD EPYC 9654\nflags\t\t: avx2 avx512f avx512_bf16\n")
    assert cpu_caption(avx2) == "CPU AMD EPYC 7B13, native bfloat16: no"
    assert cpu_caption(zen4) == "CPU AMD EPYC 9654, native bfloat16: yes"
    assert cpu_caption() == cpu_caption(cpu_summary())  # this machine's


def _fake_python(tmp_path: Path, body: str) -> Path:
    """A stand-in for .venv-rllib's python (which has no kuberl): it ignores the script and prints `body`."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


def test_rllib_figures_carry_the_cpu_of_the_side_that_launched_them(tmp_path):
    here = cpu_summary()
    done = _fake_python(tmp_path, """echo '{"done": true, "timeSeconds": 1.5, "timesteps": 100}'""")
    run = run_rllib(done, RLlibRun("PPO", cap=5.0), deadline_seconds=60)
    assert run["timesteps"] == 100 and {key: run[key] for key in here} == here
    failed = _fake_python(tmp_path, "exit 3")
    run = run_rllib(failed, RLlibRun("PPO", cap=5.0), deadline_seconds=60)
    assert "exited 3" in run["error"] and {key: run[key] for key in here} == here


# Scripts that measure nothing on this machine: they redraw runs kept in bench/results/, and each run's label names
# the CPU it ran on (tests/unit/test_bench_plot_pong.py holds them to it).
REDRAW_SAVED_RUNS = {"plot_pong.py"}


def test_every_bench_script_names_its_cpu():
    """A script that prints or writes figures (it has a main) takes the CPU from kuberl.trainer.cpu."""
    scripts = [path for path in sorted(BENCH.glob("*.py")) if re.search(r"^def main\(", path.read_text(), re.M)]
    assert len(scripts) > 10
    assert {path.name for path in scripts} >= REDRAW_SAVED_RUNS
    silent = [path.name for path in scripts if path.name not in REDRAW_SAVED_RUNS
              and not re.search(r"\bcpu_(summary|caption)\(", path.read_text())]
    assert silent == []
