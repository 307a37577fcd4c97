"""python -m kuberl_testing.controlplane start|stop|run|binaries

start     start the control plane in DIR (a new temp folder by default), print its kubeconfig, return
stop      stop what `start` started in DIR (by the PIDs it recorded)
run       start it and keep it until SIGINT or SIGTERM, then stop it
binaries  say which binaries would be used (exit 1 when etcd or kube-apiserver is missing)
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kuberl_testing.controlplane.binaries import MissingBinaries, binaries_dir, find_binaries
from kuberl_testing.controlplane.cluster import ControlPlane, ControlPlaneError, stop_recorded


def _report(plane: ControlPlane) -> None:
    rss = plane.rss_bytes().get("kube-apiserver") or 0
    print(f"export KUBECONFIG={plane.kubeconfig}")
    print(f"# server {plane.server}, up in {plane.bring_up_seconds:.1f} s, kube-apiserver RSS "
          f"{rss / 2**20:.0f} MiB; stop: python -m kuberl_testing.controlplane stop --dir {plane.work_dir}",
          flush=True)


def _start(work_dir: Path, keep: bool) -> int:
    plane = ControlPlane(work_dir).start()
    _report(plane)
    if keep:
        stopping = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopping.set())
        stopping.wait()
        plane.stop()
    return 0


def _binaries() -> int:
    found = find_binaries()
    print(f"# {binaries_dir()}")
    for name, path in found.items():
        version = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
        print(f"{name}: {(version.stdout or version.stderr).splitlines()[0]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kuberl_testing.controlplane", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "stop", "run", "binaries"])
    parser.add_argument("--dir", type=Path, help="work folder (certificates, etcd data, logs, kubeconfig)")
    args = parser.parse_args(argv)
    try:
        if args.command == "binaries":
            return _binaries()
        if args.command == "stop":
            if args.dir is None:
                parser.error("stop needs --dir, the folder `start` printed")
            stopped = stop_recorded(args.dir)
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
            return 0
        work_dir = args.dir or Path(tempfile.mkdtemp(prefix="kuberl-control-plane-"))
        return _start(work_dir, keep=args.command == "run")
    except (MissingBinaries, ControlPlaneError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
