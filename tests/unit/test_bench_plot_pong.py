"""bench/plot_pong.py: the docs' Pong figure is drawn from bench/results/, both kinds of file read alike."""

from __future__ import annotations

import json
from pathlib import Path

from bench import plot_pong

KUBERL = {"summary": {"seed": 1}, "curve": [
    {"seconds": 5.0, "timesteps": 1024, "score100": None},
    {"seconds": 60.0, "timesteps": 20480, "score100": -20.5},
    {"seconds": 120.0, "timesteps": 40960, "score100": -19.0},
]}
PEER = [
    {"system": "rllib-ppo", "peer": "rllib-ppo", "seed": 1, "curve": [[0.5, 7000, -21.0], [2.0, 30000, -20.0]]},
    {"system": "rllib-ppo", "worst_seed": 1, "curve": [[0.5, 7000, -21.0], [2.0, 30000, -20.0]]},
]


def test_kuberl_rows_and_peer_minutes_become_seconds_steps_and_scores(tmp_path: Path) -> None:
    (tmp_path / "pong-cpu-avx2-mb64-anneal2m-seed1.json").write_text(json.dumps(KUBERL))
    (tmp_path / "pong-rllib-ppo-seed1-2h.json").write_text(json.dumps(PEER))
    curves, styles, missing = plot_pong.gather(tmp_path)

    example = curves[f"{plot_pong.EXAMPLE}, seed 1"]
    assert example == [(60.0, 20480, -20.5), (120.0, 40960, -19.0)]  # the row before any game is not a point
    rllib = curves["RLlib 2.60 PPO, kuberl's values, AVX2 CPU, seed 1 (2-hour cap)"]
    assert rllib == [(30.0, 7000, -21.0), (120.0, 30000, -20.0)]
    assert set(styles) == set(curves)
    assert "pong-sample-factory-seed1-2h.json" in missing and "pong-rllib-ppo-seed1-2h.json" not in missing
    assert len(missing) == len(plot_pong.RUNS) - 2


def test_every_kuberl_run_the_figure_lists_is_kept_in_the_results() -> None:
    _, _, missing = plot_pong.gather(plot_pong.RESULTS)
    assert [name for name in missing if name.startswith("pong-cpu")] == []  # a peer's run may be still to come


def test_the_figure_is_written(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "pong.png"
    monkeypatch.setattr("sys.argv", ["plot_pong.py", "--out", str(out)])
    assert plot_pong.main() == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_run_in_the_figure_names_the_kind_of_cpu_it_ran_on() -> None:
    assert [label for _, label, _ in plot_pong.RUNS if "AVX2 CPU" not in label and "bf16 CPU" not in label] == []
