"""The Python client for RLExperiments and RLSweeps on a cluster: submit, list, status, wait, logs, delete,
and the run's results, checkpoints and stored output (kuberl.client.experiments.Client).

It reaches the cluster as kubectl does (kubeconfig, context, namespace: connection.py) and the run's
storage with the caller's own credentials. It never imports torch or Ray.
"""

from kuberl.client.connection import Connection, connect
from kuberl.client.errors import (
    AlreadyExists,
    Ambiguous,
    ClientError,
    ConfigError,
    Forbidden,
    Invalid,
    NotFound,
    Unreachable,
    UsageError,
    WaitTimeout,
)
from kuberl.client.experiments import Client

__all__ = [
    "AlreadyExists",
    "Ambiguous",
    "Client",
    "ClientError",
    "ConfigError",
    "Connection",
    "Forbidden",
    "Invalid",
    "NotFound",
    "Unreachable",
    "UsageError",
    "WaitTimeout",
    "connect",
]
