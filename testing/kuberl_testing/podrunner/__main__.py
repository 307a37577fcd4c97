"""The pod runner as a process: `python -m kuberl_testing.podrunner --kubeconfig PATH` until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from kuberl_testing.podrunner.runner import PodRunner, RunnerOptions, api_client_from_kubeconfig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kuberl_testing.podrunner",
                                     description="Run the pods of a (stand-in) Kubernetes API as local processes")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    parser.add_argument("--work-dir", help="pod directories (logs, volumes); default: a temp dir")
    parser.add_argument("--status-port", type=int,
                        help="the operator's KUBERL_STATUS_PORT: the trainers' status port keeps this number locally")
    parser.add_argument("--third-octet", type=int, help="pod addresses are 127.0.X.N")
    args = parser.parse_args(argv)
    options = RunnerOptions(work_dir=Path(args.work_dir) if args.work_dir else None, third_octet=args.third_octet,
                            fixed_ports={args.status_port: args.status_port} if args.status_port else {})
    runner = PodRunner(api_client_from_kubeconfig(args.kubeconfig), options).start()
    print(f"pod runner: pods under {runner.work_dir}", flush=True)
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    runner.stop()


if __name__ == "__main__":
    main()
