"""`kuberl sweep -f sweep.yaml`: an RLSweep on this machine (kuberl.sweep.local), and the RLSweep half of
`kuberl validate`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from kuberl.api.contract import EXIT_FAILED


def add_commands(sub: Any) -> None:
    p = sub.add_parser("sweep", help="run an RLSweep (hyperparameter search) on this machine")
    p.add_argument("-f", "--file", required=True, metavar="FILE", help="RLSweep manifest (- for stdin)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec field, e.g. maxTrials=4 or template.stop.timesteps=20000 (repeatable)")
    p.add_argument("--dir", metavar="DIR", help="the sweep's directory (default ./kuberl-sweeps/NAME); running "
                   "again with the same one continues the sweep")
    p.add_argument("--fresh", action="store_true", help="start the sweep over (earlier runs are moved aside)")
    p.add_argument("--quiet", action="store_true", help="only the final JSON line")
    p.set_defaults(func=cmd_sweep)


def _read_text(path: str) -> str:
    from kuberl.api.field_errors import fail

    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail("-f", f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail("-f", f"{path}: cannot read: {exc}") from None


def _load(args: argparse.Namespace, text: str | None = None) -> Any:
    from kuberl.api.sweep_validation import load_sweep

    return load_sweep(text if text is not None else _read_text(args.file), overrides=args.set, source=args.file)


def validate_sweep_text(text: str, args: argparse.Namespace) -> int:
    """`kuberl validate` of an RLSweep: the schema, the ranges, every parameter's values in the template, and
    (unless --skip-env-checks) the template's env checks."""
    from kuberl.api.field_errors import ManifestError
    from kuberl.api.sweep_validation import sweep_cluster_errors

    sweep = _load(args, text)
    errors = sweep_cluster_errors(sweep) if args.cluster else []
    if not args.skip_env_checks:
        from kuberl.sweep.checks import template_env_errors

        errors += template_env_errors(sweep)
    if errors:
        raise ManifestError(errors)
    spec = sweep.spec
    print(f"{args.file}: valid {spec.search.algorithm} sweep {sweep.name!r} of {len(spec.parameters)} parameters "
          f"over {spec.template.algorithm} on {spec.template.env.id}")
    return 0


def _check_template_env(sweep: Any) -> None:
    """The template's env checks before any trial starts: a mistake there would fail every trial."""
    from kuberl.api.field_errors import ManifestError
    from kuberl.sweep.checks import template_env_errors

    errors = template_env_errors(sweep)
    if errors:
        raise ManifestError(errors)


def cmd_sweep(args: argparse.Namespace) -> int:
    from kuberl.api.sweep_types import SweepPhase
    from kuberl.sweep.local import LocalSweep
    from kuberl.sweep.summary import result_line, write_summary

    sweep = _load(args)
    _check_template_env(sweep)
    directory = Path(args.dir) if args.dir else Path.cwd() / "kuberl-sweeps" / sweep.name
    runner = LocalSweep(sweep, directory, quiet=args.quiet, fresh=args.fresh)
    started = time.monotonic()
    ended = runner.run()
    summary = write_summary(directory, sweep.name, sweep.spec, runner.state, ended, runner.costs,
                            time.monotonic() - started)
    if not args.quiet:
        print(f"sweep {sweep.name}: {ended.phase.value} ({ended.reason}): {ended.message}")
        if summary["pruning"]:
            print(f"pruning saved {summary['pruning']['stepsSaved']:,} env steps, about "
                  f"{summary['pruning']['cpuSecondsSaved']:.0f} CPU-seconds")
        print(f"summary: {directory / 'summary.json'}, {directory / 'summary.png'}")
    print(json.dumps(result_line(runner.state, sweep.spec)), flush=True)
    sys.stdout.flush()
    return 0 if ended.phase == SweepPhase.SUCCEEDED else EXIT_FAILED
