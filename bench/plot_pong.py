"""The Pong-on-2-cores figure of docs/benchmarks.md, drawn from the runs kept in bench/results/.

    .venv/bin/python bench/plot_pong.py                      # writes docs/pong_cpu_avx2.png
    .venv/bin/python bench/plot_pong.py --out /tmp/pong.png

Two kinds of file are read: kuberl's (bench/pong.py's summary and its trimmed rows, `{"summary", "curve": [row]}`)
and a peer's (bench/pong.py --peer --json: a list of lines whose run line has `"peer"` and a curve of
[minutes, env steps, 100-game mean]). A run listed here whose file is not there yet is left out and named.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pong import GOAL, curve_of  # noqa: E402
from score_curve import plot_score  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DOCS_FIGURE = Path(__file__).resolve().parents[1] / "docs" / "pong_cpu_avx2.png"
AVX2_GOAL_MINUTES = 90.0
Curve = list[tuple[float, int | None, float]]

EXAMPLE = "kuberl, AVX2 CPU, the example (minibatches of 64, lr annealed over 2M)"
SEED_LINE = {1: "-", 2: "--", 3: "-."}  # one line style per seed, the same in every series of seeds
PEER_CAP = {"60min": "60-min cap", "2h": "2-hour cap"}

# (file in bench/results/, label, matplotlib line keywords); drawn in this order.
RUNS: list[tuple[str, str, dict[str, Any]]] = [
    *[(f"pong-cpu-avx2-seed{seed}.json", f"kuberl, AVX2 CPU, minibatches of 128, seed {seed}",
       {"lw": 1, "c": colour, "alpha": 0.8}) for seed, colour in ((1, "tab:blue"), (3, "tab:green"))],
    ("pong-cpu-avx2-mb64-seed1.json", "kuberl, AVX2 CPU, minibatches of 64, lr annealed over 10M, seed 1",
     {"lw": 1.2, "c": "tab:cyan"}),
    *[(f"pong-cpu-avx2-mb64-anneal2m-seed{seed}.json", f"{EXAMPLE}, seed {seed}",
       {"lw": 2, "c": "tab:olive", "ls": SEED_LINE[seed]}) for seed in (1, 2, 3)],
    *[(f"pong-cpu-bf16-mb64-anneal2m-seed{seed}.json",
       f"kuberl, bf16 CPU (avx512_bf16), the example with learner.bf16=true, seed {seed}",
       {"lw": 2, "c": "tab:pink", "ls": SEED_LINE[seed]}) for seed in (1, 2, 3)],
    *[(f"pong-cpu-bf16-f32learner-seed{seed}.json", f"kuberl, bf16 CPU, the example (float32 learner), seed {seed}",
       {"lw": 1.5, "c": "magenta", "ls": ls}) for seed, ls in ((1, ":"), (2, (0, (3, 1, 1, 1))), (3, (0, (1, 3))))],
    ("pong-cpu-avx2-mb256-seed3-milestones.json", "kuberl, AVX2 CPU, minibatches of 256, seed 3 (milestones)",
     {"c": "k", "ls": "--", "marker": "o", "ms": 4}),
    ("pong-cpu-avx2-epochs2-seed3.json", "kuberl, AVX2 CPU, minibatches of 256, 2 epochs, seed 3",
     {"c": "grey", "lw": 1}),
    *[(f"pong-cpu-seed{seed}.json", f"kuberl, bf16 CPU (avx512_bf16), minibatches of 256, seed {seed}",
       {"c": "tab:purple", "ls": SEED_LINE[seed], "lw": 1, "alpha": 0.7}) for seed in (1, 2)],
    ("pong-cleanrl-seed1-60min.json", "CleanRL ppo_atari.py, AVX2 CPU, seed 1", {"c": "tab:red", "lw": 1.5}),
    ("pong-cleanrl-seed1-2h.json", "CleanRL ppo_atari.py, bf16 CPU (avx512_bf16), seed 1",
     {"c": "tab:red", "lw": 1.5, "ls": "--"}),
    ("pong-rllib-ppo-seed1-2h.json", "RLlib 2.60 PPO, kuberl's values, AVX2 CPU, seed 1",
     {"c": "tab:brown", "lw": 1.5}),
    ("pong-sample-factory-seed1-2h.json", "Sample Factory 2.1.1 APPO, its Atari settings, AVX2 CPU, seed 1",
     {"c": "navy", "lw": 1.5}),
    ("pong-cleanrl-envpool-seed1-2h.json", "CleanRL ppo_atari_envpool.py, bf16 CPU (avx512_bf16), seed 1",
     {"c": "tab:orange", "lw": 1.5}),
]


def curve_in(saved: Any) -> Curve:
    """(wall seconds, env steps or None, 100-game mean) from either kind of results file."""
    if isinstance(saved, list):  # a peer's lines: the run's own line carries "peer"
        run = next(line for line in saved if line.get("peer"))
        return [(minutes * 60, steps, score) for minutes, steps, score in run["curve"]]
    return curve_of(saved)


def with_cap(name: str, label: str) -> str:
    """A peer's label names the cap its file was run under (pong-<peer>-seed1-<cap>.json)."""
    cap = PEER_CAP.get(Path(name).stem.rsplit("-", 1)[-1])
    return f"{label} ({cap})" if cap else label


def gather(results: Path) -> tuple[dict[str, Curve], dict[str, dict[str, Any]], list[str]]:
    """The curves found in `results`, their styles, and the files listed but not there."""
    curves: dict[str, Curve] = {}
    styles: dict[str, dict[str, Any]] = {}
    missing = []
    for name, label, style in RUNS:
        path = results / name
        if not path.exists():
            missing.append(name)
            continue
        label = with_cap(name, label)
        curves[label] = curve_in(json.loads(path.read_text()))
        styles[label] = style
    return curves, styles, missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=DOCS_FIGURE)
    args = parser.parse_args()
    curves, styles, missing = gather(args.results)
    plot_score(curves, GOAL, "Pong from pixels on 2 cores, no GPU: kuberl's PPO and the peers", args.out, styles=styles,
               wall_marks=(AVX2_GOAL_MINUTES,), legend_fontsize=6.5, legend_loc="lower right", size=(12, 4.5), dpi=90)
    print(json.dumps({"figure": str(args.out), "curves": len(curves), "not_run_yet": missing}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
