"""Generate docs/sweep-reference.md, the RLSweep field reference (`make crds` runs this module)."""

from __future__ import annotations

from pathlib import Path

from kuberl.api.reference import _rows, write_generated_doc
from kuberl.api.sweep_types import RLSweepSpec

SWEEP_DOC_FILE = Path("docs/sweep-reference.md")


def render_sweep_reference() -> str:
    header = "| field | type | default | bounds | meaning |\n|---|---|---|---|---|"
    rows = [row for row in _rows(RLSweepSpec, "spec") if not row.startswith("| `spec.template.")]
    out = [
        "# RLSweep manifest reference",
        "",
        "Generated from `src/kuberl/api/sweep_types.py` by `make crds`; do not edit. The CRD",
        "(`crds/rlsweep.yaml`) is generated from the same types; `spec.template` is an RLExperiment spec",
        "(docs/manifest.md). How sweeps run: docs/sweeps.md.",
        "",
        "## spec",
        "",
        header,
        *rows,
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_generated_doc(SWEEP_DOC_FILE, render_sweep_reference(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
