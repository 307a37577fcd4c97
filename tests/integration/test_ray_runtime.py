"""A local run starts its own Ray, even when a `ray start` cluster already runs on the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from kuberl_testing.ports import free_port
from kuberl_testing.process_tree import MARKER_VARIABLE, start_process, stop_process_tree

HEAD_IP = "127.0.0.9"

PRINT_GCS = (
    "import ray\n"
    "from kuberl.trainer.distributed.ray_runtime import init_ray\n"
    "init_ray(num_cpus=1)\n"
    "print(ray.get_runtime_context().gcs_address)\n"
    "ray.shutdown()\n"
)


def test_init_ray_without_an_address_never_joins_a_cluster_started_on_this_machine(tmp_path):
    port = free_port(HEAD_IP)
    marker = uuid.uuid4().hex
    # `ray start` records its address in $RAY_TMPDIR/ray_current_cluster, where a plain ray.init() looks for
    # a cluster to join: a private (short: Unix socket paths) temp dir keeps it from every other test.
    ray_tmp = tempfile.mkdtemp(prefix="kr-", dir="/tmp")
    env = {**os.environ, MARKER_VARIABLE: marker, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    head = start_process(
        [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", f"--node-ip-address={HEAD_IP}",
         f"--port={port}", "--num-cpus=1", "--include-dashboard=false", "--block"],
        env, tmp_path, tmp_path / "ray-head.log",
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ray-head.log").read_text().count("Ray runtime started"):
            assert head.poll() is None, (tmp_path / "ray-head.log").read_text()
            assert time.monotonic() < deadline, "ray start --head did not come up"
            time.sleep(0.5)
        assert os.path.exists(os.path.join(ray_tmp, "ray", "ray_current_cluster")) or os.path.exists(
            os.path.join(ray_tmp, "ray_current_cluster")), "ray start recorded no address to join"
        result = subprocess.run([sys.executable, "-c", PRINT_GCS], env=env,
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr
        gcs_address = result.stdout.strip().splitlines()[-1]
        assert gcs_address != f"{HEAD_IP}:{port}", "init_ray() joined the machine's running cluster"
        assert gcs_address.startswith("127.0.0.2:"), gcs_address
    finally:
        stop_process_tree(head, marker, grace_seconds=10)
        shutil.rmtree(ray_tmp, ignore_errors=True)


ACTOR_MALLOC = """
import ctypes, os, tempfile, threading, time
import ray
from kuberl.trainer.distributed.ray_runtime import init_ray, start_memory_trimmer

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

@ray.remote(max_concurrency=8)
class Busy:
    def __init__(self, trim):
        if trim:
            start_memory_trimmer(interval_s=0.5)

    def arenas(self):
        libc = ctypes.CDLL("libc.so.6")
        libc.fopen.restype = ctypes.c_void_p
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        def allocate():
            for _ in range(200):
                [bytearray(4096) for _ in range(50)]
        threads = [threading.Thread(target=allocate) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        with tempfile.NamedTemporaryFile(suffix=".xml") as f:
            stream = libc.fopen(f.name.encode(), b"w")
            libc.malloc_info(0, stream)
            libc.fclose(stream)
            return open(f.name).read().count("<heap nr="), len(os.listdir("/proc/self/task"))

    def strand(self):
        # 96 MiB in 64 KiB blocks (below the mmap threshold: from the heap), each followed by a small
        # block that stays: freeing the big ones leaves holes that the heap cannot shrink past.
        blocks, pins = [], []
        for _ in range(1536):
            block = bytearray(65536)
            block[::4096] = b"\\x01" * 16  # touch every page
            blocks.append(block)
            pins.append(bytearray(256))
        before = rss_mb()
        del blocks
        time.sleep(2.0)
        return round(before - rss_mb(), 1), len(pins)

init_ray(num_cpus=1)
results = []
for trim in (False, True):
    busy = Busy.remote(trim)
    arenas, threads = ray.get([busy.arenas.remote() for _ in range(4)])[-1]
    given_back, _ = ray.get(busy.strand.remote())
    results += [arenas, threads, given_back]
    ray.kill(busy)
print(*results)
ray.shutdown()
"""


def test_ray_actors_malloc_settings_keep_freed_memory_from_being_stranded(tmp_path):
    """glibc gives each allocating thread of an actor its own arena (up to 8 per core), and memory freed
    inside its heap stays mapped: the Ape-X learner grew ~40 MB/h. kuberl's Ray nodes start their
    processes with two arenas (`WORKER_ENV_VARS`), and its actors trim the heap periodically
    (`start_memory_trimmer`): freed pages go back to the kernel, which an actor without it keeps."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("RAY_ADDRESS", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")}
    result = subprocess.run([sys.executable, "-c", ACTOR_MALLOC], env=env, capture_output=True, text=True,
                            timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    values = result.stdout.split()[-6:]
    arenas, threads = int(values[0]), int(values[1])
    kept_without, given_back_with = float(values[2]), float(values[5])
    assert threads > 8, "the actor should have many threads for this to mean anything"
    assert arenas <= 2, f"{arenas} malloc arenas in an actor with {threads} threads"
    assert kept_without < 20, f"without trimming {kept_without} MB went back: the holes were not stranded"
    assert given_back_with > 70, f"with the trimmer only {given_back_with} of 96 MB went back"
