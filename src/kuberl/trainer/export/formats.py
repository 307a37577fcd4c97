"""Saving an ExportedPolicy as ONNX (torch.onnx.export) or TorchScript (torch.jit.trace).

Both files stand alone: onnxruntime runs the ONNX file, plain torch (`torch.jit.load`) the
TorchScript one; neither needs kuberl. The JSON that `describe` makes travels inside each file:
ONNX metadata_props["kuberl"], and the TorchScript archive's extra file "kuberl.json".
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from kuberl.trainer.export.policy import INPUT_NAME, OUTPUT_NAME, ExportedPolicy

SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}
METADATA_KEY = "kuberl"
TORCHSCRIPT_EXTRA_FILE = "kuberl.json"


def save_onnx(policy: ExportedPolicy, example: torch.Tensor, path: Path, description: str) -> None:
    import onnx

    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript-based exporter: no onnxscript, and a fraction of a second for these networks.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(policy, (example,), str(path), dynamo=False, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME], dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
    model = onnx.load(str(path))
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, description
    onnx.save(model, str(path))


def save_torchscript(policy: ExportedPolicy, example: torch.Tensor, path: Path, description: str) -> None:
    with torch.no_grad():
        traced = torch.jit.trace(policy, (example,), check_trace=False)
    torch.jit.save(traced, str(path), _extra_files={TORCHSCRIPT_EXTRA_FILE: description})


def save_policy(policy: ExportedPolicy, example: torch.Tensor, fmt: str, path: Path, description: str) -> None:
    if fmt == "onnx":
        save_onnx(policy, example, path, description)
    elif fmt == "torchscript":
        save_torchscript(policy, example, path, description)
    else:
        raise ValueError(f"unknown export format {fmt!r} (onnx, torchscript)")


def write_export(algo: object, fmt: str, path: Path, **description: object) -> ExportedPolicy:
    """Save the algorithm's greedy policy, observation filter included, as `fmt` at `path`."""
    from kuberl.trainer.export.policy import describe, example_input, exported_policy

    policy = exported_policy(algo)
    save_policy(policy, example_input(algo.observation_space), fmt, path, describe(algo, **description))  # type: ignore[attr-defined]
    return policy
