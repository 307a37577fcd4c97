"""`kuberl export`: a checkpoint's greedy policy, rebuilt locally from a local or S3 checkpoint, as an
ONNX or TorchScript file."""

from __future__ import annotations

from pathlib import Path

from kuberl.api.validation import fail
from kuberl.trainer.evaluation.checkpoint import load_algorithm


def export_checkpoint(uri: str, fmt: str, *, out: str | None = None, endpoint: str | None = None) -> str:
    """Write the checkpoint's greedy policy as an ONNX or TorchScript file; says where and how big."""
    from kuberl.api.types import EXPORT_FORMATS
    from kuberl.trainer.export.formats import SUFFIXES, write_export
    from kuberl.trainer.tracking.tensorboard import run_name

    if fmt not in EXPORT_FORMATS:
        raise fail("--format", f"{fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    algo, info = load_algorithm(uri, endpoint=endpoint)
    try:
        run_uri = info.uri.rsplit("/checkpoints/", 1)[0]
        path = Path(out) if out else Path(f"{run_name(run_uri)}-{info.iteration:06d}{SUFFIXES[fmt]}")
        if path.parent and not path.parent.is_dir():
            raise fail("--out", f"{path.parent}: no such directory")
        write_export(algo, fmt, path, checkpoint=info.uri)
    finally:
        algo.stop()
    return (f"{fmt} policy of {info.uri} (iteration {info.iteration}): {path} ({path.stat().st_size:,} bytes)\n"
            f"input {algo.observation_space.shape} {algo.observation_space.dtype} observations (a batch), "
            f"output greedy actions")
