"""A run started from another run's checkpoint (PBT's exploit step) reports its own episodes only: the return
window it scores on is not the donor's."""

from __future__ import annotations

from pathlib import Path

import pytest

from kuberl.api.validation import load_manifest
from kuberl.trainer.algorithms.config import algorithm_config_for
from kuberl.trainer.run.restore_from import restore_from
from kuberl_testing.manifests import experiment_manifest

pytestmark = pytest.mark.timeout(300)


def _algo(name: str, seed: int):
    # CartPole's first episodes under a fresh policy last about 20 steps: an iteration of 4 x 64 steps ends several.
    return algorithm_config_for(load_manifest(experiment_manifest(
        name, algorithm="ppo", seed=seed, stop={"iterations": 10},
        rollouts={"workers": 0, "envsPerWorker": 4, "fragmentLength": 64}))).build()


def test_a_restored_run_scores_its_own_episodes_not_the_donors(tmp_path: Path) -> None:
    donor = _algo("donor", seed=1)
    try:
        for _ in range(3):
            donor.train()
        donor_window = list(donor.return_window)
        assert donor_window, "the donor finished no episode"
        donor.save(f"file://{tmp_path}/donor")
    finally:
        donor.stop()

    member = _algo("member", seed=2)
    try:
        restore_from(member, f"file://{tmp_path}/donor")
        assert member.episodes == donor.episodes  # the counters go on from the donor's
        assert member.episode_return_mean is None and not member.return_window
        result = member.train()
        own = member.episodes - donor.episodes
        assert own > 0 and len(member.return_window) == own  # only the episodes it played itself
        assert result["episodeReturnMean"] == pytest.approx(sum(member.return_window) / own)
    finally:
        member.stop()
