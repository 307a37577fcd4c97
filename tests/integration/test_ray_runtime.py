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
import ctypes, os, tempfile, threading
import ray
from kuberl.trainer.distributed.ray_runtime import init_ray

@ray.remote(max_concurrency=8)
class Busy:
    def malloc(self):
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
            arenas = open(f.name).read().count("<heap nr=")
        big = bytearray(8 << 20)  # freed: glibc's default raises its mmap threshold to 8 MiB
        del big
        block = bytearray(1 << 20)
        # glibc marks a chunk it mapped on its own with IS_MMAPPED (0x2) in the size word before it. (Counting
        # mallinfo2().hblks around the allocation races with the actor's other threads.)
        address = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block))
        mapped = int(bool(ctypes.c_size_t.from_address(address - ctypes.sizeof(ctypes.c_size_t)).value & 2))
        del block
        return arenas, len(os.listdir("/proc/self/task")), mapped

init_ray(num_cpus=1)
busy = Busy.remote()
print(*ray.get([busy.malloc.remote() for _ in range(4)])[-1])
ray.shutdown()
"""


def test_ray_actors_malloc_settings_keep_freed_memory_from_being_stranded(tmp_path):
    """glibc gives each allocating thread of an actor its own arena (up to 8 per core), and after a
    large block is freed it serves blocks up to that size from the heap: freed memory stays stranded
    there, and the Ape-X learner grew ~40 MB/h. kuberl's Ray jobs start their workers with two arenas
    and a fixed mmap threshold (`WORKER_ENV_VARS`)."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("RAY_ADDRESS", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")}
    result = subprocess.run([sys.executable, "-c", ACTOR_MALLOC], env=env, capture_output=True, text=True,
                            timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    arenas, threads, mapped = (int(x) for x in result.stdout.split()[-3:])
    assert threads > 8, "the actor should have many threads for this to mean anything"
    assert arenas <= 2, f"{arenas} malloc arenas in an actor with {threads} threads"
    assert mapped == 1, "a 1 MiB block after a freed 8 MiB one came from the heap, not its own mapping"
