"""The operator under a whole-lifecycle load: 150 experiments created, reporting progress, deleted.

Separate processes for the API emulator and the operator (its RSS is its own). 500 experiments run
in bench/operator_lifecycle.py; docs/reliability.md has both sets of figures.
"""

from __future__ import annotations

import pytest

from kuberl_testing.fault_figures import report_figures
from kuberl_testing.lifecycle_load import lifecycle_load

COUNT = 150
POLL_SECONDS = 2.0
RSS_LIMIT_MB = 250  # half the chart's operator memory limit (512Mi)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_150_experiments_get_children_progress_and_go_away_with_bounded_memory_and_lag() -> None:
    figures = lifecycle_load(COUNT, workers=1, poll_seconds=POLL_SECONDS, timeout=120)
    report_figures(f"operator-load-{COUNT}", **figures)
    assert figures["with_all_children"] == COUNT, figures
    assert figures["running"] == COUNT, figures
    lags = figures["progress_lag_seconds"]
    assert None not in lags, f"some .status never caught up with its trainer: {figures}"
    # Each poll round reaches every experiment: the lag stays near one poll period and does not
    # grow from round to round (a backlog would). The slack is for a busy 2-core machine.
    assert max(lags) <= 15 * POLL_SECONDS, figures
    assert lags[-1] <= lags[0] + 3 * POLL_SECONDS, figures
    assert figures["all_gone"] and figures["left_over_children"] == 0, figures
    assert figures["rss_mb_peak"] < RSS_LIMIT_MB, figures
    assert figures["reconciles"] >= 3 * COUNT, "every experiment is reconciled on create, run and poll"
