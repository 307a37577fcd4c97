"""`kuberl export`: a checkpoint's greedy policy, rebuilt locally from a local or S3 checkpoint, as an
ONNX or TorchScript file."""

from __future__ import annotations

from pathlib import Path

from kuberl.api.field_errors import fail
from kuberl.trainer.evaluation.checkpoint import load_algorithm


def export_checkpoint(uri: str, fmt: str, *, out: str | None = None, endpoint: str | None = None,
                      policy: str | None = None) -> str:
    """Write the checkpoint's greedy policy as an ONNX or TorchScript file; says where and how big. A multi-agent
    checkpoint writes one file per policy (RUN-ITERATION-POLICY), or only `policy`'s."""
    from kuberl.api.types import EXPORT_FORMATS
    from kuberl.trainer.export.formats import SUFFIXES, write_export
    from kuberl.trainer.tracking.tensorboard import run_name

    if fmt not in EXPORT_FORMATS:
        raise fail("--format", f"{fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    algo, info = load_algorithm(uri, endpoint=endpoint)
    reports = []
    try:
        names: tuple[str, ...] = getattr(algo, "policy_names", ())
        if policy is not None and policy not in names:
            raise fail("--policy", f"{policy!r}: the checkpoint's policies are {', '.join(names)}" if names
                       else "the checkpoint is of a single-agent run, which has one policy")
        chosen: list[str | None] = [policy] if policy is not None else list(names) or [None]
        if out and len(chosen) > 1:
            raise fail("--out", f"names one file, but the checkpoint has {len(chosen)} policies: add --policy")
        run_uri = info.uri.rsplit("/checkpoints/", 1)[0]
        for name in chosen:
            if name is not None:
                algo.select_policy(name)
            stem = f"{run_name(run_uri)}-{info.iteration:06d}" + (f"-{name}" if name else "")
            path = Path(out) if out else Path(f"{stem}{SUFFIXES[fmt]}")
            if path.parent and not path.parent.is_dir():
                raise fail("--out", f"{path.parent}: no such directory")
            write_export(algo, fmt, path, checkpoint=info.uri)
            reports.append(f"{fmt} policy{f' {name!r}' if name else ''} of {info.uri} (iteration {info.iteration}): "
                           f"{path} ({path.stat().st_size:,} bytes)\n"
                           f"input {algo.observation_space.shape} {algo.observation_space.dtype} observations "
                           "(a batch), output greedy actions")
    finally:
        algo.stop()
    return "\n".join(reports)
