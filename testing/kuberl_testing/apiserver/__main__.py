"""The emulator as a process: `python -m kuberl_testing.apiserver --port 0 --kubeconfig PATH` prints its URL."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools

from kuberl_testing.apiserver.kubeconfig import write_kubeconfig
from kuberl_testing.apiserver.serving import serve_emulator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kuberl_testing.apiserver",
                                     description="Kubernetes API emulator on 127.0.0.1 (for tests and e2e)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", metavar="PATH", help="write a kubeconfig pointing at the emulator")
    parser.add_argument("--no-kuberl-crd", action="store_true", help="do not pre-register the RLExperiment CRD")
    parser.add_argument("--kueue", action="store_true",
                        help="gate queued pods as Kueue's webhook does (kuberl_testing.kueue)")
    args = parser.parse_args(argv)

    async def serve() -> None:
        async with serve_emulator(args.port, with_kuberl_crd=not args.no_kuberl_crd) as (emulator, url):
            if args.kueue:  # the gate and label, not the finalizer: no Kueue controller would remove it
                from kuberl_testing.kueue import kueue_webhook

                emulator.add_admission(functools.partial(kueue_webhook, finalizer=False))
            if args.kubeconfig:
                write_kubeconfig(args.kubeconfig, url)
            print(url, flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
