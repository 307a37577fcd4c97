"""The stand-in kubelet: runs the pods of a Kubernetes API (the emulator) as local processes.

Each pod gets its own loopback address 127.0.X.N as `status.podIP` (never 127.0.0.1, which Ray
rewrites), its container's command runs with the pod's environment (`valueFrom` resolved,
ConfigMap and Secret volumes written to a directory whose path replaces the mount path), Service
names resolve to the selected pod's address, and the pod's phase, container state, exit code and
termination message go back to the API. A deleted pod's processes are stopped, and on shutdown
everything the runner started is stopped.

Stand-in specifics: container ports get a local port each (Ray's GCS binds `*:6379`, so two pods
cannot both have it), except the ones in `fixed_ports`; the trainer's status port (the pod's
KUBERL_STATUS_PORT, set by the operator) becomes its local port, its address is pinned by
KUBERL_STATUS_HOST and its termination log path by KUBERL_TERMINATION_LOG. One container per pod;
restartPolicy is treated as Never.

One job per module:
  runner      PodRunner, the loop: observe pods and Services, start, finish and stop pods
  localpod    pure functions: a Pod body -> a local process's argv, environment, files and addresses
  pod_status  the status documents the runner writes (waiting, running, terminated)
  addresses   the pool of loopback addresses for pods
  __main__    the process: `python -m kuberl_testing.podrunner --kubeconfig PATH`

Use `PodRunner(api_client, options).start()` / `.stop()` from Python.
"""

from kuberl_testing.podrunner.addresses import AddressPool
from kuberl_testing.podrunner.runner import PodRunner, RunnerOptions, api_client_from_kubeconfig

__all__ = ["AddressPool", "PodRunner", "RunnerOptions", "api_client_from_kubeconfig"]
