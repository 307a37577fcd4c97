"""`kuberl info RUN` (the run record: resolved manifest, versions, image, seeds, machine) and
`kuberl checkpoints RUN` (every complete checkpoint, its returns and size, latest and best)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kuberl.trainer.run.run_record import RunRecord


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="a run directory or its storage URI (file://, s3://)")
    p.add_argument("--endpoint", metavar="URL", help="S3-compatible endpoint")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="text (default) or json")


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print a run's record: resolved manifest, versions, image, seeds, machine")
    _output(p)
    p.add_argument("--attempt", type=int, metavar="N", help="the record of attempt N (default: the latest)")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("checkpoints", help="list a run's checkpoints: iteration, env steps, returns, size, "
                                           "latest and best")
    _output(p)
    p.set_defaults(func=cmd_checkpoints)


def cmd_info(args: argparse.Namespace) -> int:
    from kuberl.trainer.run.run_record import read_records, record_text
    from kuberl.trainer.storage import open_store
    from kuberl.trainer.storage.base import StorageError

    store = open_store(args.run, endpoint=args.endpoint)
    records = read_records(store)
    if not records:
        raise StorageError(f"{store.uri}: no run record (run-record/); is this a run directory written by "
                           "kuberl 0.1 or later?")
    record: RunRecord | None
    if args.attempt is None:
        record = records[-1]
    else:
        record = next((r for r in records if r.get("attempt") == args.attempt), None)
        if record is None:
            known = ", ".join(str(r.get("attempt")) for r in records)
            raise StorageError(f"--attempt: {store.uri} has no record of attempt {args.attempt} (it has {known})")
    print(json.dumps(record, indent=1) if args.output == "json" else record_text(record, attempts=len(records)))
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from kuberl.trainer.iteration_result import line_from_json
    from kuberl.trainer.storage import open_store
    from kuberl.trainer.storage.base import StorageError
    from kuberl.trainer.storage.checkpoint_listing import (
        COUNTERS_FILE,
        checkpoint_rows,
        checkpoints_table,
        window_return,
    )
    from kuberl.trainer.storage.checkpoints import list_checkpoints
    from kuberl.trainer.storage.errors import NotFound
    from kuberl.trainer.storage.jsonl import parse_jsonl
    from kuberl.trainer.storage.results import RESULTS
    from kuberl.trainer.storage.run import SPEC

    store = open_store(args.run, endpoint=args.endpoint)
    checkpoints = list_checkpoints(store)
    if not checkpoints and not store.exists(SPEC):
        raise StorageError(f"{store.uri}: no checkpoints and no experiment.yaml; is this a run directory?")
    saved_returns: dict[int, float] = {}
    try:
        results = [line_from_json(line) for line in parse_jsonl(store.get_bytes(RESULTS))]
    except NotFound:  # a run Algorithm.save() wrote: each checkpoint's own return window
        results = []
        saved_returns = {c.iteration: value for c in checkpoints
                         if (value := window_return(store.get_bytes(f"{c.key}/{COUNTERS_FILE}"))) is not None}
    rows = checkpoint_rows(checkpoints, results, saved_returns)
    if args.output == "json":
        print(json.dumps([row.to_json() for row in rows], indent=1))
    else:
        print(checkpoints_table(rows, run_uri=store.uri))
    return 0
