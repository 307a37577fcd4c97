"""A real Kubernetes control plane for tests (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler), built by `make control-plane`; see docs/testing.md."""

from kuberl_testing.controlplane.binaries import BIN_VARIABLE, MissingBinaries, binaries_dir, find_binaries
from kuberl_testing.controlplane.cluster import ControlPlane, ControlPlaneError, stop_recorded

__all__ = ["BIN_VARIABLE", "ControlPlane", "ControlPlaneError", "MissingBinaries", "binaries_dir", "find_binaries",
           "stop_recorded"]
