"""Checkpoint write throughput against raw boto3 upload_file, on one moto S3 server, in one run.

    .venv/bin/python -P bench/storage.py            # 10 MB and 100 MB states
    .venv/bin/python -P bench/storage.py --large    # also 1 GB (needs ~4 GB of free memory)

For each size: the raw baseline uploads a file of that size with boto3's
`upload_file` (default transfer settings); kuberl writes a checkpoint holding
that many bytes with `write_checkpoint` through S3Store (every file, sha256,
manifest.json, `latest`). Both go to the same moto server, run in its own
process so it does not share this process's GIL. Target: kuberl >= 50% of raw. The first line names the CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from kuberl_testing.s3server import DEFAULT_CREDENTIALS, S3ServerProcess

MB = 1_000_000


def measure_interleaved(first, second, repeats: int) -> tuple[float, float]:
    """Median seconds of each of two calls, alternated so that a noisy machine slows both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((first, times[0]), (second, times[1])):
            started = time.perf_counter()
            fn()
            out.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large", action="store_true", help="include the 1 GB state")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [10 * MB, 100 * MB] + ([1000 * MB] if args.large else [])

    server = S3ServerProcess().start()
    endpoint = server.endpoint
    os.environ.update(DEFAULT_CREDENTIALS)
    try:
        import boto3

        from kuberl.trainer.cpu import cpu_caption
        from kuberl.trainer.storage.checkpoints import write_checkpoint
        from kuberl.trainer.storage.s3 import S3Store

        raw = boto3.client("s3", endpoint_url=endpoint)
        raw.create_bucket(Bucket="bench")
        store = S3Store("s3://bench/kuberl", endpoint=endpoint)
        print(f"moto S3 at {endpoint}; median of {args.repeats} runs; {cpu_caption()}")
        print(f"{'state':>8}  {'raw upload_file':>16}  {'kuberl checkpoint':>18}  {'ratio':>6}")
        with tempfile.TemporaryDirectory() as tmp:
            for size in sizes:
                data = os.urandom(size)
                path = Path(tmp) / "state.bin"
                path.write_bytes(data)
                counter = iter(range(1, 1_000_000))
                raw_s, ours_s = measure_interleaved(
                    lambda p=path: raw.upload_file(str(p), "bench", "raw/state.bin"),
                    lambda d=data, c=counter: write_checkpoint(store, next(c), {"model.pt": d}, timesteps=0),
                    args.repeats,
                )
                store.delete_prefix("checkpoints/")
                raw_mbs, ours_mbs = size / MB / raw_s, size / MB / ours_s
                print(f"{size // MB:>5} MB  {raw_mbs:>11.1f} MB/s  {ours_mbs:>13.1f} MB/s  {ours_mbs / raw_mbs:>5.0%}",
                      flush=True)
                del data
                path.unlink()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
