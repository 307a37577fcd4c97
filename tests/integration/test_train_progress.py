"""`kuberl train`'s progress: a tqdm bar with an ETA on a terminal (a real pseudo-terminal here), the plain
progress lines on a pipe (logs, pods)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

MANIFEST = """\
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {name: progress}
spec:
  algorithm: ppo
  env: {id: CartPole-v1}
  config: {seed: 3}
  rollouts: {workers: 0, envsPerWorker: 4, fragmentLength: 32}
  stop: {timesteps: 768, iterations: 100, episodeReturnMean: 500}
  checkpoint: {everyIterations: 100}
"""
# A few iterations of PPO's batch reach 768 env steps long before 100 iterations.
PLAIN_LINE = re.compile(r"^iter +\d+ \| steps +[\d,]+ \| +[\d,]+ steps/s \| return +(-|[\d.]+) \| +[\d.]+s$")


def command(tmp_path: Path) -> list[str]:
    (tmp_path / "exp.yaml").write_text(MANIFEST)
    return [sys.executable, "-m", "kuberl.cli", "train", "-f", str(tmp_path / "exp.yaml"),
            "--storage", f"file://{tmp_path / 'runs'}"]


def run_on_a_terminal(argv: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Runs argv with stdout and stderr on a pseudo-terminal of 120 columns; its exit code and all it wrote."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            chunks.append(chunk)
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), b"".join(chunks).decode(errors="replace")
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_terminal_gets_a_bar_towards_the_first_stop_criterion_with_an_eta(tmp_path: Path) -> None:
    code, text = run_on_a_terminal(command(tmp_path), tmp_path)
    assert code == 0, text
    frames = [frame for frame in re.split(r"[\r\n]", text) if "%|" in frame]
    assert frames, text
    last = frames[-1]
    # timesteps ends the run first: the bar counts them, and the stopping result fills it.
    assert re.match(r"^timesteps 100%\|[^|]+\| 768/768 \[\d\d:\d\d<00:00, [\d,]+ steps/s, "
                    r"return (-|[\d.]+) -> 500\]", last), last
    assert any(re.search(r"<\d\d:\d\d,", frame) for frame in frames)  # an ETA, not "?"
    assert not [line for line in text.splitlines() if PLAIN_LINE.match(line.strip())]
    assert re.search(r"Succeeded: timesteps [\d,]+ >= 768", text)


def test_a_pipe_gets_the_plain_lines(tmp_path: Path) -> None:
    proc = subprocess.run(command(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\r" not in proc.stdout and "%|" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    progress = [line for line in lines if line.startswith("iter ")]
    assert progress and all(PLAIN_LINE.match(line) for line in progress), proc.stdout
    assert lines[0].startswith("training ppo on CartPole-v1; run: file://")
    # the stopping result's line is always written, and the summary follows it
    iteration, steps = re.match(r"iter +(\d+) \| steps +([\d,]+) \|", progress[-1]).groups()
    assert lines[lines.index(progress[-1]) + 1].startswith(
        f"Succeeded: timesteps {steps} >= 768 after {iteration} iterations, {steps} env steps in ")
