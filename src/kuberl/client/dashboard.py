"""`kuberl dashboard`: Ray's dashboard of an experiment on this machine, through `kubectl port-forward`.

The experiment's NetworkPolicy admits the dashboard port (8265) only from the experiment's own pods
(operator/builders/networkpolicy.py), so nothing else on the pod network reaches it. A port-forward
does not cross the pod network: the API server and the kubelet carry it into the head pod's own
network namespace, for whoever RBAC allows `create` on `pods/portforward` in the namespace. The
dashboard also asks for the Ray cluster's token (RAY_AUTH_MODE=token), kept in the Secret NAME-ray-token.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from kuberl.operator import names
from kuberl.operator.builders.secret import TOKEN_KEY
from kuberl.operator.builders.service import DASHBOARD_PORT


@dataclass(frozen=True)
class DashboardForward:
    command: list[str]  # kubectl port-forward ...
    url: str  # where the dashboard answers on this machine
    token_command: str  # prints the Ray token the dashboard asks for

    def shell(self) -> str:
        return shlex.join(self.command)


def port_forward(name: str, namespace: str, *, local_port: int = DASHBOARD_PORT, address: str = "127.0.0.1",
                 context: str | None = None, kubeconfig: str | None = None, kubectl: str = "kubectl") -> DashboardForward:
    """The kubectl command that forwards `address:local_port` to the head pod's dashboard port."""
    flags = [*(["--kubeconfig", kubeconfig] if kubeconfig else []), *(["--context", context] if context else [])]
    command = [kubectl, *flags, "-n", namespace, "port-forward", f"pod/{names.head_name(name)}",
               f"{local_port}:{DASHBOARD_PORT}", "--address", address]
    secret = names.token_secret_name(name)
    token = shlex.join([kubectl, *flags, "-n", namespace, "get", "secret", secret, "-o",
                        f"jsonpath={{.data.{TOKEN_KEY}}}"]) + " | base64 -d"
    host = f"[{address}]" if ":" in address else address
    return DashboardForward(command, f"http://{host}:{local_port}", token)
