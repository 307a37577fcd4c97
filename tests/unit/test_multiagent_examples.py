"""The multi-agent example manifests validate for a cluster and their envs pass the trainer's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from kuberl.api.validation import cluster_errors, load_manifest
from kuberl.trainer.run.checks import env_errors

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MULTI_AGENT = sorted(EXAMPLES.glob("multiagent-*.yaml"))


def test_there_is_an_example_per_case() -> None:
    assert {p.name for p in MULTI_AGENT} >= {"multiagent-spread-ppo.yaml", "multiagent-speaker-listener.yaml",
                                            "multiagent-adversary-appo.yaml", "multiagent-pistonball-ppo.yaml"}


@pytest.mark.parametrize("path", MULTI_AGENT, ids=[p.name for p in MULTI_AGENT])
def test_example_validates_for_a_cluster_and_its_env_checks_pass(path: Path) -> None:
    experiment = load_manifest(path.read_text(), source=path.name)
    assert cluster_errors(experiment) == []
    assert env_errors(experiment) == []
