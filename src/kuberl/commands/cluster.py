"""`kuberl submit | list | status | logs | delete | dashboard`: experiments and sweeps on a cluster, through
the Kubernetes API with the current kubeconfig context and namespace, as kubectl reaches them. A thin layer
over kuberl.client; exit codes as kuberl.cli says (2 for a mistake the user fixes, 1 for a failure).

A bare NAME is whichever kind has it; `sweep/NAME` or `experiment/NAME` (or kubectl's `rls/NAME`,
`rlexperiment.kuberl.io/NAME`, ...) says which, as `kuberl list` prints names when it lists both kinds.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from kuberl.api.contract import EXIT_FAILED
from kuberl.api.sweep_types import RLSweep
from kuberl.api.types import Phase
from kuberl.client.kinds import EXPERIMENT, KINDS, SWEEP, Kind, kind_named, kind_words

_EXAMPLES = """\
examples:
  kuberl submit -f examples/cartpole-ppo.yaml --set storage.uri=s3://bucket/runs --wait
  kuberl submit -f examples/sweeps/cartpole-lr.yaml --set template.storage.uri=s3://bucket/runs --wait
  kuberl list -A                                          # RLExperiments and RLSweeps
  kuberl list sweeps
  kuberl status cartpole-ppo -o yaml
  kuberl status sweep/cartpole-lr                         # its trials and the best one
  kuberl logs sweep/cartpole-lr --trial 3
  kuberl logs cartpole-ppo --follow
  kuberl logs cartpole-ppo --storage s3://bucket/runs     # after the experiment was deleted
  kuberl logs s3://bucket/runs/research/cartpole-ppo --attempt 1
  kuberl dashboard cartpole-ppo
  kuberl delete cartpole-ppo
"""


def _connection_args(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("cluster (as kubectl)")
    group.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
    group.add_argument("--context", metavar="NAME", help="kubeconfig context (default its current-context)")
    group.add_argument("-n", "--namespace", metavar="NS", help="namespace (default the context's, then 'default')")


def _client(args: argparse.Namespace) -> Any:
    from kuberl.client import Client, ConfigError

    try:
        return Client(args.kubeconfig, args.context, args.namespace)
    except ImportError as exc:  # an install without the client's extra
        raise ConfigError(f"the cluster commands need the Kubernetes client ({exc.name} is not installed): "
                          "pip install 'kuberl[client]'") from None


def _handled(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A ClientError becomes one line on stderr and its exit code; anything else goes to kuberl.cli."""
    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        from kuberl.client import ClientError

        try:
            return func(args)
        except ClientError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code

    return run


def _now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


def _progress_line(name: str, status: dict[str, Any]) -> str:
    from kuberl.client.formatting import progress_text

    phase = status.get("phase") or Phase.PENDING.value
    attempt = f", attempt {status['attempt']}" if status.get("attempt") else ""
    return f"{name}: {phase}{attempt}, {progress_text(status)}"


def _wait_and_report(client: Any, name: str, namespace: str, timeout: float | None) -> int:
    obj = client.wait(name, timeout=timeout, namespace=namespace,
                      on_change=lambda s: print(_progress_line(name, s), flush=True))
    status = obj.get("status") or {}
    if status.get("lastCheckpoint"):
        print(f"{name}: last checkpoint {status['lastCheckpoint']}")
    return _outcome(name, status)


def _wait_for_sweep(client: Any, name: str, namespace: str, metric: str, timeout: float | None) -> int:
    from kuberl.client.formatting import best_text, sweep_progress_line

    obj = client.wait_sweep(name, timeout=timeout, namespace=namespace,
                            on_change=lambda s: print(sweep_progress_line(name, s, metric), flush=True))
    status = obj.get("status") or {}
    print(f"{name}: best trial {best_text(status.get('best'), metric)}")
    return _outcome(name, status)


def _outcome(name: str, status: dict[str, Any]) -> int:
    """The run's (or the sweep's) last word and its exit code: 0 Succeeded, 1 otherwise."""
    if status.get("message"):
        print(f"{name}: {status['message']}")
    return 0 if status.get("phase") == Phase.SUCCEEDED else EXIT_FAILED


@_handled
def cmd_submit(args: argparse.Namespace) -> int:
    from kuberl.api.yaml_text import parse_yaml
    from kuberl.client.manifests import prepare

    source: Any = parse_yaml(sys.stdin.read(), "stdin") if args.file == "-" else args.file
    # Validated before the cluster is asked anything: a mistake is named even with no cluster at hand.
    doc, resource = prepare(source, args.set, namespace=args.namespace or "default",
                            namespace_given=args.namespace is not None)
    if args.dry_run:
        from kuberl.client.formatting import render

        print(render(doc, "yaml"))
        return 0
    client = _client(args)
    created = client.submit(source, overrides=args.set)
    meta = created["metadata"]
    print(f"{resource.kind.lower()}.kuberl.io/{meta['name']} created in namespace {meta['namespace']}")
    if not args.wait:
        return 0
    if isinstance(resource, RLSweep):
        return _wait_for_sweep(client, meta["name"], meta["namespace"], resource.spec.objective.metric, args.timeout)
    return _wait_and_report(client, meta["name"], meta["namespace"], args.timeout)


def _listed(client: Any, kinds: list[Kind], all_namespaces: bool) -> dict[Kind, list[dict[str, Any]]]:
    """The objects of each kind. With both kinds asked for, one the cluster lacks (no RLSweep CRD) has none,
    and one RBAC hides is left out with a warning, unless both are hidden."""
    from kuberl.client import ClientError, Forbidden, NotFound

    found: dict[Kind, list[dict[str, Any]]] = {}
    refused: list[ClientError] = []
    for kind in kinds:
        try:
            found[kind] = (client.list_sweeps if kind is SWEEP else client.list)(all_namespaces=all_namespaces)
        except (NotFound, Forbidden) as exc:
            if len(kinds) == 1:
                raise
            found[kind] = []
            if isinstance(exc, Forbidden):
                refused.append(exc)
    if len(refused) == len(kinds):
        raise refused[0]
    for refusal in refused:
        print(f"warning: {refusal}", file=sys.stderr)
    return found


@_handled
def cmd_list(args: argparse.Namespace) -> int:
    from kuberl.client.formatting import render, resource_table

    client = _client(args)
    kinds = [args.kind] if args.kind else list(KINDS)
    found = _listed(client, kinds, args.all_namespaces)
    if args.output in ("json", "yaml"):
        items = [item for kind in kinds for item in found[kind]]
        print(render({"apiVersion": "v1", "kind": "List", "items": items}, args.output))
        return 0
    if not any(found.values()):
        where = "any namespace" if args.all_namespaces else f"namespace {client.namespace}"
        print(f"No {' or '.join(k.plural for k in kinds)} found in {where}.", file=sys.stderr)
        return 0
    tables = [resource_table(found[kind], _now(), kind=kind.kind, all_namespaces=args.all_namespaces,
                             wide=args.output == "wide", prefix=f"{kind.qualified}/" if len(kinds) > 1 else "")
              for kind in kinds if found[kind]]
    print("\n\n".join(tables))
    return 0


def _get(client: Any, kind: Kind, name: str) -> dict[str, Any]:
    return client.get_sweep(name) if kind is SWEEP else client.get(name)


@_handled
def cmd_status(args: argparse.Namespace) -> int:
    from kuberl.client import Forbidden
    from kuberl.client import formatting as f

    client = _client(args)
    kind, name = client.resolve(args.name)
    obj = _get(client, kind, name)
    try:
        events = client.sweep_events(name) if kind is SWEEP else client.events(name)
    except Forbidden as exc:  # reading the object but not Events: the status still helps
        print(f"warning: {exc}", file=sys.stderr)
        events = []
    if args.output in ("json", "yaml"):
        document = f.sweep_status_document if kind is SWEEP else f.status_document
        print(f.render(document(obj, events), args.output))
    else:
        print((f.describe_sweep if kind is SWEEP else f.describe)(obj, events, _now()))
    return 0


def _log_kind(client: Any, target: str) -> tuple[Kind, str]:
    """Whose output: a kind-qualified name's, else a bare name's one kind (an experiment when neither has it:
    a deleted experiment's output is still read from --storage)."""
    from kuberl.client import NotFound

    try:
        return client.resolve(target)
    except NotFound:
        return EXPERIMENT, target


@_handled
def cmd_logs(args: argparse.Namespace) -> int:
    from kuberl.client import UsageError
    from kuberl.client.kinds import parse_reference
    from kuberl.client.logs import experiment_logs, is_run_location, run_logs, sweep_logs

    options = {"follow": args.follow, "tail": args.tail, "attempt": args.attempt, "endpoint": args.endpoint,
               "storage": args.storage}
    if is_run_location(args.target) and parse_reference(args.target)[0] is None:
        logs = run_logs(args.target, attempt=args.attempt, tail=args.tail, endpoint=args.endpoint)
    else:
        client = _client(args)
        kind, name = _log_kind(client, args.target)
        if kind is SWEEP:
            logs = sweep_logs(client, name, args.trial, **options)
        elif args.trial is not None:
            raise UsageError(f"--trial: {args.target} is an rlexperiment; --trial picks a trial of an rlsweep")
        else:
            logs = experiment_logs(client, name, **options)
    print(f"kuberl: {logs.note}", file=sys.stderr, flush=True)
    for text in logs.text:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


@_handled
def cmd_delete(args: argparse.Namespace) -> int:
    client = _client(args)
    kind, name = client.resolve(args.name)
    wait = args.timeout if args.wait else None
    obj = _get(client, kind, name)
    (client.delete_sweep if kind is SWEEP else client.delete)(name, wait=wait)
    print(f"{kind.qualified}/{name} deleted from namespace {client.namespace}")
    spec = obj.get("spec") or {}
    storage = (((spec.get("template") if kind is SWEEP else spec) or {}).get("storage") or {}).get("uri")
    if storage and kind is SWEEP:
        print(f"its trials go with it; their storage stays under {storage} (kuberl logs TRIAL --storage {storage})")
    elif storage:
        from kuberl.client.runs import run_uri

        print(f"its storage stays: {run_uri(obj)} (kuberl logs {name} --storage {storage})")
    return 0


def _kind_arg(word: str) -> Kind:
    kind = kind_named(word)
    if kind is None:
        raise argparse.ArgumentTypeError(f"{word!r} is not a kind: {kind_words()}")
    return kind


@_handled
def cmd_dashboard(args: argparse.Namespace) -> int:
    from kuberl.client import ClientError
    from kuberl.client.dashboard import port_forward
    from kuberl.operator.status.observation import PodPhase

    client = _client(args)
    client.get(args.name)  # not found: say so, naming the namespace
    pod = client.head_pod(args.name)
    phase = ((pod or {}).get("status") or {}).get("phase")
    if phase != PodPhase.RUNNING:
        raise ClientError(f"rlexperiment {args.name!r} in namespace {client.namespace!r} has no running head pod "
                          f"({'none' if pod is None else phase}): its dashboard lives only while the head runs")
    kubectl = shutil.which("kubectl")
    forward = port_forward(args.name, client.namespace, local_port=args.port, address=args.address,
                           context=args.context, kubeconfig=args.kubeconfig, kubectl=kubectl or "kubectl")
    if args.print or kubectl is None:
        if kubectl is None:
            print("kubectl is not on PATH; run this where it is:", file=sys.stderr)
        print(forward.shell())
        print(f"# then open {forward.url}; the dashboard asks for the Ray token: {forward.token_command}")
        return 0
    print(f"Ray dashboard of {args.name}: {forward.url} (Ctrl-C stops the port-forward)", flush=True)
    print(f"it asks for the Ray token: {forward.token_command}", flush=True)
    return subprocess.run(forward.command, check=False).returncode


def add_commands(sub: Any) -> None:
    formatter = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("submit", help="create an RLExperiment or an RLSweep on the cluster (validated first)",
                       epilog=_EXAMPLES, formatter_class=formatter)
    p.add_argument("-f", "--file", required=True, metavar="FILE", help="RLExperiment or RLSweep manifest (- for stdin)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec field, e.g. rollouts.workers=2 (a sweep: template.rollouts.workers=2) "
                   "(repeatable)")
    p.add_argument("--wait", action="store_true", help="follow the experiment, or the sweep's trials, until it "
                   "Succeeded (exit 0) or Failed (exit 1)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="with --wait: give up after this")
    p.add_argument("--dry-run", action="store_true", help="validate and print what would be created")
    _connection_args(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("list", help="list RLExperiments and RLSweeps (as kubectl get rlx,rls)")
    p.add_argument("kind", nargs="?", type=_kind_arg, metavar="KIND",
                   help=f"only one kind: {kind_words()}")
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("-o", "--output", choices=["wide", "json", "yaml"])
    _connection_args(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("status", help="an experiment's phase, progress, last checkpoint and events; a sweep's "
                       "trials and its best trial")
    p.add_argument("name", metavar="NAME", help="a name, or KIND/NAME when an experiment and a sweep share it "
                   "(sweep/NAME, experiment/NAME)")
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    _connection_args(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="the trainer's output: the head pod's log, or the run's storage once it is gone",
                       epilog=_EXAMPLES, formatter_class=formatter)
    p.add_argument("target", metavar="NAME|RUN", help="an experiment's or a sweep's name (KIND/NAME when they share "
                   "it), or a run's URI or directory")
    p.add_argument("--trial", type=int, default=None, metavar="N", help="a sweep: the output of its trial N")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the run ends")
    p.add_argument("--tail", type=int, default=None, metavar="LINES", help="only the last LINES lines")
    p.add_argument("--attempt", type=int, default=None, metavar="N",
                   help="an earlier attempt's output (from storage; default the newest)")
    p.add_argument("--storage", metavar="URI",
                   help="the experiment's spec.storage.uri, when the experiment itself is deleted")
    p.add_argument("--endpoint", metavar="URL", help="S3-compatible endpoint (default spec.storage.endpoint)")
    _connection_args(p)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("delete", help="delete an experiment (its pods go, its storage stays) or a sweep (its "
                       "trials go)")
    p.add_argument("name", metavar="NAME", help="a name, or KIND/NAME when an experiment and a sweep share it")
    p.add_argument("--wait", action="store_true", help="return once it is gone")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="with --wait (default 60)")
    _connection_args(p)
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("dashboard", help="forward Ray's dashboard of a running experiment to this machine")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--port", type=int, default=8265, help="local port (default 8265)")
    p.add_argument("--address", default="127.0.0.1", help="local address to listen on (default 127.0.0.1)")
    p.add_argument("--print", action="store_true", help="print the kubectl command instead of running it")
    _connection_args(p)
    p.set_defaults(func=cmd_dashboard)
