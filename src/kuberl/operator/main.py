"""Run the operator: `kuberl operator` (the CLI wires its flags here) or `python -m kuberl.operator`."""

from __future__ import annotations

import argparse
import os
import sys

PEERING_NAME = "kuberl"


def watch_scope(namespaces: list[str], all_namespaces: bool, env_namespaces: tuple[str, ...]) -> tuple[bool, list[str]]:
    """(clusterwide, namespaces): flags win over KUBERL_WATCH_NAMESPACES; nothing at all means every namespace."""
    if all_namespaces:
        return True, []
    chosen = list(namespaces) or list(env_namespaces)
    return (not chosen), chosen


def run_operator(namespaces: list[str] | None = None, all_namespaces: bool = False, metrics_port: int = 9090,
                 health_port: int = 8081, *, host: str | None = None, standalone: bool | None = None) -> None:
    """Serve RLExperiments until SIGTERM: liveness on :health_port/healthz, Prometheus on :metrics_port."""
    import kopf
    from prometheus_client import start_http_server

    import kuberl.operator.handlers  # noqa: F401  (registers the handlers)
    from kuberl.operator.metrics import REGISTRY
    from kuberl.operator.settings import Settings, SettingsError

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"kuberl operator: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    host = host or os.environ.get("KUBERL_LISTEN_HOST", "0.0.0.0")
    if standalone is None:
        standalone = os.environ.get("KUBERL_PEERING", "on").lower() in ("off", "false", "0")
    clusterwide, chosen = watch_scope(namespaces or [], all_namespaces, settings.watch_namespaces)
    level = os.environ.get("KUBERL_LOG_LEVEL", "warning").lower()  # Kopf logs every handler run at info
    kopf.configure(verbose=level == "debug", quiet=level not in ("debug", "info"))
    if metrics_port:
        start_http_server(metrics_port, addr=host, registry=REGISTRY)
    # Peering keeps two operators from serving one experiment (Kopf has no leader election). The named
    # peering is mandatory: Kopf pauses until its KopfPeering/ClusterKopfPeering object exists (the chart
    # creates it); KUBERL_PEERING=off runs standalone instead.
    peering_name = os.environ.get("KUBERL_PEERING_NAME") or PEERING_NAME
    kopf_settings = kopf.OperatorSettings()
    # Named namespaces need nothing cluster-wide: without scanning, Kopf neither lists namespaces nor
    # watches CRDs, so a namespaced install needs no ClusterRole (the CRD must exist at start-up).
    kopf_settings.scanning.disabled = not clusterwide
    kopf.run(
        settings=kopf_settings,
        clusterwide=clusterwide,
        namespaces=chosen,
        standalone=standalone,
        peering_name=None if standalone else peering_name,
        liveness_endpoint=f"http://{host}:{health_port}/healthz" if health_port else None,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The operator's flags: one definition for `kuberl operator` and `python -m kuberl.operator`."""
    parser.add_argument("--namespace", action="append", metavar="NS", help="watch this namespace (repeatable)")
    parser.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument("--metrics-port", type=int, default=9090)
    parser.add_argument("--health-port", type=int, default=8081)
    parser.add_argument("--standalone", action="store_true", help="no peering (one operator per scope)")


def run_from_arguments(args: argparse.Namespace) -> int:
    run_operator(args.namespace or [], args.all_namespaces, args.metrics_port, args.health_port,
                 standalone=True if args.standalone else None)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kuberl.operator", description="the kuberl operator")
    add_arguments(parser)
    return run_from_arguments(parser.parse_args(argv))
