"""bench/pong.py: a seed interrupted by a signal ends the series; the seeds after it do not start."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from bench import pong


def test_an_interrupted_seed_starts_no_other(monkeypatch, tmp_path: Path) -> None:
    started: list[int] = []

    def seed_run(seed: int, cap: float, overrides: list[str], stop: threading.Event) -> dict:
        started.append(seed)
        if seed == 2:
            stop.set()  # as train_to_score does when SIGTERM comes during the run
        return {"summary": {"seed": seed, "stopped": "interrupted"} if seed == 2 else {"seed": seed}, "rows": []}

    monkeypatch.setattr(pong, "kuberl_seed", seed_run)
    args = argparse.Namespace(out=tmp_path, only_rllib=False, reuse=False, cap=60.0, set=[])
    runs = pong.kuberl_runs(args, [1, 2, 3], threading.Event())
    assert started == [1, 2] and len(runs) == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pong-kuberl-seed1.json", "pong-kuberl-seed2.json"]
