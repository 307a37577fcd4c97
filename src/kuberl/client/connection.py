"""Which cluster, as which user, in which namespace: resolved the way kubectl resolves them.

The kubeconfig is --kubeconfig, else $KUBECONFIG (files joined by ':', merged), else ~/.kube/config;
inside a pod with none of these, the pod's service account. The context is --context, else the
kubeconfig's current-context. The namespace is -n/--namespace, else the context's namespace, else
"default".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl.client.errors import ConfigError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

DEFAULT_KUBECONFIG = "~/.kube/config"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Connection:
    api: ApiClient
    namespace: str  # the namespace commands act in
    namespace_given: bool  # -n/--namespace was given (a manifest's own namespace must then agree)
    context: str | None  # None in a pod, on its service account
    server: str


def kubeconfig_paths(flag: str | None, env: Mapping[str, str]) -> list[str]:
    """The kubeconfig files to merge, in order, as kubectl picks them."""
    if flag:
        return [flag]
    if env.get("KUBECONFIG"):
        return [p for p in env["KUBECONFIG"].split(os.pathsep) if p]
    return [DEFAULT_KUBECONFIG]


def merged_contexts(configs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """The contexts of several kubeconfigs and the current-context, as kubectl merges them: the first
    file to name a context (or to set current-context) wins."""
    contexts: dict[str, dict[str, Any]] = {}
    current = None
    for doc in configs:
        for context in doc.get("contexts") or []:
            if isinstance(context, dict) and context.get("name") not in contexts:
                contexts[str(context.get("name"))] = context
        current = current or doc.get("current-context") or None
    return list(contexts.values()), current


def _read_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(Path(path).expanduser().read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"kubeconfig {path}: cannot read: {exc}") from None
    return doc if isinstance(doc, dict) else {}


def context_namespace(contexts: list[dict[str, Any]], name: str) -> str | None:
    for context in contexts:
        if context.get("name") == name:
            return (context.get("context") or {}).get("namespace") or None
    raise ConfigError(f"context {name!r} is not in the kubeconfig (it has: "
                      f"{', '.join(sorted(str(c.get('name')) for c in contexts)) or 'none'})")


def connect(kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None,
            env: Mapping[str, str] | None = None) -> Connection:
    """An API client for the chosen context and the namespace to act in; ConfigError when there is none."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    env = os.environ if env is None else env
    paths = kubeconfig_paths(kubeconfig, env)
    existing = [p for p in paths if Path(p).expanduser().is_file()]
    if kubeconfig and not existing:
        raise ConfigError(f"--kubeconfig {kubeconfig}: no such file")
    configuration = client.Configuration()
    if not existing:
        if env.get("KUBERNETES_SERVICE_HOST") and context is None:
            config.load_incluster_config(client_configuration=configuration)
            own = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() if SERVICE_ACCOUNT_NAMESPACE.is_file() else None
            return Connection(client.ApiClient(configuration), namespace or own or DEFAULT_NAMESPACE,
                              namespace is not None, None, configuration.host)
        raise ConfigError(f"no kubeconfig: {', '.join(paths)} not found (set KUBECONFIG or use --kubeconfig)")
    joined = os.pathsep.join(str(Path(p).expanduser()) for p in existing)
    contexts, current = merged_contexts([_read_yaml(p) for p in existing])
    chosen = context or current
    if not chosen:
        raise ConfigError(f"the kubeconfig ({joined}) has no current-context: use --context")
    own = context_namespace(contexts, chosen)
    try:
        config.load_kube_config(config_file=joined, context=chosen, client_configuration=configuration,
                                persist_config=False)
    except ConfigException as exc:
        raise ConfigError(f"kubeconfig {joined}: {exc}") from None
    return Connection(client.ApiClient(configuration), namespace or own or DEFAULT_NAMESPACE,
                      namespace is not None, chosen, configuration.host)
