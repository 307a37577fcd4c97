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
