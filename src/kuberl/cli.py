"""The `kuberl` command line.

Exit codes: 0 done; 1 the run failed; 2 the user must fix something (manifest,
storage location, arguments); 130 interrupted; 141 the reader of stdout went away
(`kuberl ... | head`). A user mistake never prints a traceback. Heavy libraries
are imported only by the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from kuberl import __version__
from kuberl.api.contract import DEFAULT_STATUS_PORT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID_SPEC
from kuberl.operator.main import add_arguments as add_operator_arguments
from kuberl.operator.main import run_from_arguments as run_operator_from_arguments

if TYPE_CHECKING:
    from kuberl.api.field_errors import FieldError

# Modules of kuberl.commands whose add_commands(sub) add their subcommands (see its docstring).
COMMAND_MODULES: tuple[str, ...] = ("cluster", "sweep", "records")

EXIT_USAGE = EXIT_INVALID_SPEC  # in the head pod the operator reads it so: never retried
EXIT_READER_GONE = 128 + signal.SIGPIPE  # 141, as a shell reports `yes | head`'s yes

_DESCRIPTION = """\
kuberl trains reinforcement-learning policies from one RLExperiment manifest:
on this machine with `kuberl train`, or on Kubernetes through the kuberl operator.

examples:
  kuberl train -f examples/cartpole-ppo.yaml
  kuberl train -f experiment.yaml --set rollouts.workers=2 --set config.lr=0.0005
  kuberl validate -f experiment.yaml
  kuberl submit -f experiment.yaml -n research --wait      # on the cluster of your kubeconfig
  kuberl status cartpole-ppo; kuberl logs cartpole-ppo --follow
  kuberl sweep -f examples/sweeps/cartpole-lr.yaml
  kuberl submit -f sweep.yaml --wait; kuberl status sweep/cartpole-lr   # a sweep on the cluster
  kuberl evaluate kuberl-runs/cartpole-ppo --episodes 20
  kuberl traces kuberl-runs/cartpole-ppo --png curve.png
  kuberl tensorboard kuberl-runs/cartpole-ppo
  kuberl export kuberl-runs/cartpole-ppo --format onnx
  kuberl checkpoints kuberl-runs/cartpole-ppo
  kuberl info kuberl-runs/cartpole-ppo
"""


def _read_manifest_text(path: str) -> str:
    from kuberl.api.field_errors import fail

    if path == "-":
        return sys.stdin.read()
    file = Path(path)
    if not file.is_file():
        raise fail("-f", f"{path}: no such file")
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail("-f", f"{path}: cannot read: {exc}") from None


def _load(args: argparse.Namespace):
    from kuberl.api.validation import load_manifest

    return load_manifest(_read_manifest_text(args.file), overrides=args.set, source=args.file)


def cmd_validate(args: argparse.Namespace) -> int:
    from kuberl.api.defaults import defaults_line_without_env
    from kuberl.api.field_errors import ManifestError
    from kuberl.api.validation import cluster_errors, load_manifest
    from kuberl.api.yaml_text import parse_yaml

    text = _read_manifest_text(args.file)
    if parse_yaml(text, args.file).get("kind") == "RLSweep":
        from kuberl.commands.sweep import validate_sweep_text

        return validate_sweep_text(text, args)
    experiment = load_manifest(text, overrides=args.set, source=args.file)  # stdin is read once
    errors = []
    line = defaults_line_without_env(experiment)
    if not args.skip_env_checks:
        from kuberl.trainer.run.checks import callbacks_errors, env_errors
        from kuberl.trainer.run.memory_budget import replay_memory_errors_for
        from kuberl.trainer.run.task_defaults import resolve_task_defaults

        errors.extend(env_errors(experiment) + callbacks_errors(experiment))
        if not errors:  # what `kuberl train` would add (Ape-X's replay ratio is measured when training starts)
            experiment, defaults = resolve_task_defaults(experiment, measure=False)
            line = defaults.line() if defaults is not None else line
        if args.cluster and not errors:  # the replay against the pods' memory
            errors.extend(replay_memory_errors_for(experiment, in_cluster=True))
    if args.cluster:
        errors.extend(cluster_errors(experiment))
    if errors:
        raise ManifestError(errors)
    print(f"{args.file}: valid {experiment.spec.algorithm} experiment {experiment.name!r} on {experiment.spec.env.id}")
    print(line)
    return 0


def _storage_option_errors(storage: str | None) -> list[FieldError]:
    """--storage checked as spec.storage.uri is, a plain path allowed: a mistyped scheme (s4://, S3://, s3:/)
    would otherwise be taken for a local folder of that name."""
    from kuberl.api.field_errors import FieldError
    from kuberl.api.storage_uri import storage_uri_problem

    problem = storage_uri_problem(storage, plain_path=True) if storage else None
    return [FieldError("--storage", problem)] if problem else []


def cmd_train(args: argparse.Namespace) -> int:
    from kuberl.api.field_errors import ManifestError
    from kuberl.trainer.run.driver import TrainOptions, run_training
    from kuberl.trainer.storage.errors import MissingCredentials

    storage_errors = _storage_option_errors(args.storage)
    try:
        experiment = _load(args)
    except ManifestError as exc:
        raise ManifestError(exc.errors + storage_errors) from None
    if storage_errors:
        raise ManifestError(storage_errors)
    options = TrainOptions(
        storage_uri=args.storage,
        fresh=args.fresh,
        in_cluster=args.in_cluster,
        status_port=args.status_port,
        quiet=args.quiet,
        out=cast(TextIO, _ReaderMayLeave(sys.stdout)),
    )
    try:
        summary = run_training(experiment, options)
    except MissingCredentials as exc:  # on this machine, a local directory is the other way to train
        raise MissingCredentials(f"{exc}; or train into a local directory with --storage PATH") from None
    return summary.exit_code


def cmd_evaluate(args: argparse.Namespace) -> int:
    from kuberl.trainer.evaluation.checkpoint import evaluate_checkpoint

    report = evaluate_checkpoint(args.checkpoint, episodes=args.episodes, endpoint=args.endpoint, seed=args.seed)
    print(report)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from kuberl.trainer.export.checkpoint import export_checkpoint

    print(export_checkpoint(args.checkpoint, args.format, out=args.out, endpoint=args.endpoint,
                            policy=args.policy))
    return 0


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from kuberl.trainer.tracking.tensorboard import open_tensorboard

    return open_tensorboard(args.run, endpoint=args.endpoint, directory=args.dir, port=args.port,
                            print_only=args.print)


def cmd_traces(args: argparse.Namespace) -> int:
    from kuberl.trainer.run.traces_report import report

    print(report(args.uri, endpoint=args.endpoint, png_path=args.png))
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    from kuberl.api.crd import render_crd
    from kuberl.api.sweep_crd import render_sweep_crd

    documents = {"RLExperiment": render_crd, "RLSweep": render_sweep_crd}
    kinds = [args.kind] if args.kind else list(documents)
    sys.stdout.write("---\n".join(documents[kind]() for kind in kinds))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kuberl", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"kuberl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def manifest_args(p: argparse.ArgumentParser, kinds: str = "RLExperiment") -> None:
        p.add_argument("-f", "--file", required=True, metavar="FILE", help=f"{kinds} manifest (- for stdin)")
        p.add_argument(
            "--set", action="append", default=[], metavar="KEY=VALUE",
            help="override a spec field, e.g. rollouts.workers=2 or config.lr=0.0005 (repeatable)",
        )

    p = sub.add_parser("train", help="train an experiment on this machine (or in the head pod)")
    manifest_args(p)
    p.add_argument("--storage", metavar="URI", help="where the run goes (file:///path or s3://bucket/prefix)")
    p.add_argument("--fresh", action="store_true", help="start over in a new run directory instead of resuming")
    p.add_argument("--quiet", action="store_true", help="no progress line, only the summary")
    p.add_argument("--in-cluster", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--status-port", type=int, default=None, metavar="PORT",
                   help=f"serve /status and /metrics on this port (default {DEFAULT_STATUS_PORT} in a cluster, off locally)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("validate", help="check an RLExperiment or RLSweep manifest without training")
    manifest_args(p, "RLExperiment or RLSweep")
    p.add_argument("--cluster", action="store_true", help="also apply the checks a cluster run needs")
    p.add_argument("--skip-env-checks", action="store_true", help="do not construct the env (as the operator)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("evaluate", help="run a checkpoint's greedy policy for N episodes")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="a run directory or checkpoints/N, local or s3://")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--endpoint", metavar="URL", help="S3-compatible endpoint")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("export", help="write a checkpoint's greedy policy as an ONNX or TorchScript file")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="a run directory or checkpoints/N, local or s3://")
    p.add_argument("--format", required=True, choices=["onnx", "torchscript"])
    p.add_argument("--out", metavar="PATH", help="the file to write (default RUN-ITERATION.onnx or .pt here)")
    p.add_argument("--policy", metavar="NAME", help="a multi-agent checkpoint: only this policy (default: one file "
                   "per policy, RUN-ITERATION-POLICY)")
    p.add_argument("--endpoint", metavar="URL", help="S3-compatible endpoint")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("tensorboard", help="copy a run's TensorBoard event files here and start TensorBoard")
    p.add_argument("run", metavar="RUN_URI", help="a run directory, local or s3://")
    p.add_argument("--dir", metavar="DIR", help="where the event files go (default ./kuberl-tensorboard)")
    p.add_argument("--port", type=int, default=6006)
    p.add_argument("--print", action="store_true", help="copy the files and print the command instead of running it")
    p.add_argument("--endpoint", metavar="URL", help="S3-compatible endpoint")
    p.set_defaults(func=cmd_tensorboard)

    p = sub.add_parser("traces", help="summarise a run's episode traces and plot its learning curve")
    p.add_argument("uri", metavar="URI", help="a run directory, local or s3://")
    p.add_argument("--png", metavar="PATH", help="write the learning curve here")
    p.add_argument("--endpoint", metavar="URL", help="S3-compatible endpoint")
    p.set_defaults(func=cmd_traces)

    p = sub.add_parser("operator", help="run the Kubernetes operator")
    add_operator_arguments(p)
    p.set_defaults(func=run_operator_from_arguments)

    p = sub.add_parser("crd", help="print the CustomResourceDefinitions (RLExperiment and RLSweep, one YAML stream)")
    p.add_argument("--kind", choices=["RLExperiment", "RLSweep"], help="only this kind's CRD")
    p.set_defaults(func=cmd_crd)

    for name in COMMAND_MODULES:
        importlib.import_module(f"kuberl.commands.{name}").add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # a reader gone before the last buffered output shows here, not at the exit
    except BrokenPipeError:  # `kuberl checkpoints RUN | head`: end quietly, as other Unix tools do
        _discard_stdout()
        return EXIT_READER_GONE
    return code


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the flush Python makes at the exit finds nothing to fail on (the
    Python documentation's recipe for a closed pipe). A stdout with no file descriptor is left as it is."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


class _ReaderMayLeave:
    """`kuberl train`'s stdout: once its reader has gone (`kuberl train ... | head -3`) the run goes on to its
    end, checkpoints and results included, printing nowhere."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _discard_stdout()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _discard_stdout()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _run(argv: list[str] | None) -> int:
    from kuberl.api.field_errors import ManifestError

    args = build_parser().parse_args(argv)
    # `kill -USR1 <pid>` (or `kubectl exec ... kill -USR1 1`) prints every thread's stack to stderr:
    # how to see where a stuck trainer or operator is, without a debugger in the image.
    # A stderr with no file descriptor (in-process callers, notebooks) cannot take the dump.
    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        return args.func(args)
    except ManifestError as exc:
        for error in exc.errors:
            print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        from kuberl.trainer.storage.base import StorageError

        if isinstance(exc, StorageError):
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        from kuberl.trainer.storage.faults import StoreUnavailable

        if isinstance(exc, StoreUnavailable):  # a store unwell past the retry deadline: retryable
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        raise


if __name__ == "__main__":
    sys.exit(main())
