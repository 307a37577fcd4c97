"""Operator lifecycle load: N RLExperiments created, running with progress polls, then deleted.

The emulator and the operator run as processes; stand-in trainers on loopback addresses answer
the operator's status polls (see kuberl_testing.lifecycle_load). Prints apply -> children,
pods Running -> phase Running, the progress lag of .status (three rounds: growing means a
backlog), delete -> children gone, the operator's RSS per phase and reconcile durations, and the CPU (--json:
cpu_model, cpu_bf16: native bfloat16, cpu_flags).
tests/integration/test_operator_load.py runs 150 with a 2 s poll; this runs 500 by default.

    .venv/bin/python bench/operator_lifecycle.py --experiments 500 --poll-seconds 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kuberl.trainer.cpu import cpu_caption, cpu_summary
from kuberl_testing.lifecycle_load import lifecycle_load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", type=int, default=500)
    parser.add_argument("--workers", type=int, default=1, help="worker pods per experiment")
    parser.add_argument("--poll-seconds", type=float, default=10.0,
                        help="the operator's KUBERL_STATUS_POLL_SECONDS (its default is 10)")
    parser.add_argument("--trainers", type=int, default=8, help="stand-in trainer addresses")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for each phase")
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    args = parser.parse_args()

    started = time.monotonic()
    f = {**lifecycle_load(args.experiments, workers=args.workers, poll_seconds=args.poll_seconds,
                          trainers=args.trainers, timeout=args.timeout), **cpu_summary()}
    wall = time.monotonic() - started
    print(f"operator lifecycle load: {f['experiments']} experiments x (head + {f['workers_each']} worker(s) "
          f"+ 4 objects), status poll every {f['status_poll_seconds']:g} s; {wall:.0f} s in all; {cpu_caption(f)}")
    print(f"  create:   {f['with_all_children']}/{f['experiments']} with all children in {f['created_seconds']} s; "
          f"apply -> children {f['apply_to_children_seconds']}")
    if "running" in f:
        print(f"  run:      {f['running']}/{f['experiments']} Running; pods Running -> phase Running "
              f"{f['pods_running_to_phase_running_seconds']}")
        print(f"  progress: .status behind the trainers by {f['progress_lag_seconds']} s (three rounds)")
        print(f"  delete:   all children gone: {f['all_gone']} in {f['delete_seconds']} s "
              f"({f['left_over_children']} left)")
        print(f"  reconciles: {f['reconciles']}, duration p50 <= {f['reconcile_seconds_p50_bucket']} s, "
              f"p99 <= {f['reconcile_seconds_p99_bucket']} s (histogram buckets)")
    print(f"  operator RSS MB: idle {f['rss_mb_idle']}, created {f.get('rss_mb_created')}, running "
          f"{f.get('rss_mb_running')}, deleted {f.get('rss_mb_deleted')}, peak {f.get('rss_mb_peak')}; "
          f"load average {f.get('load_average')}")
    if args.json:
        Path(args.json).write_text(json.dumps(f, indent=2))
    ok = f["with_all_children"] == f["experiments"] and f.get("running") == f["experiments"] and f.get("all_gone")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
