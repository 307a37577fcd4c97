"""Measured figures of fault tests (recovery time, work lost), printed and collected for docs/reliability.md.

    KUBERL_RELIABILITY_LOG=/tmp/figures.jsonl .venv/bin/pytest tests/integration/... -s
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def report_figures(fault: str, **figures: Any) -> None:
    """Print one fault's measured figures, and append them to $KUBERL_RELIABILITY_LOG (JSON Lines) if set:
    docs/reliability.md quotes them."""
    line = {"fault": fault, **{k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}}
    # sys.__stdout__: KopfRunner swaps sys.stdout while the operator runs in the test process.
    print("RELIABILITY " + json.dumps(line), file=sys.__stdout__, flush=True)
    path = os.environ.get("KUBERL_RELIABILITY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
