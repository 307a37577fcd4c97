"""Running mean/std filter: merging deltas equals computing on all the data."""

import numpy as np
import pytest

from kuberl.trainer.sampling.filters import MeanStdFilter, RunningStats, stats_from_bytes, stats_to_bytes


def test_parallel_merge_equals_statistics_of_the_whole() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(3.0, 2.0, size=(50, 3)), rng.normal(-1.0, 0.5, size=(70, 3))
    stats = RunningStats((3,))
    stats.push_batch(a[:20])
    stats.push_batch(a[20:])
    other = RunningStats((3,))
    other.push_batch(b)
    stats.merge(other)
    both = np.concatenate([a, b])
    assert stats.count == 120
    assert stats.mean == pytest.approx(both.mean(axis=0))
    assert stats.std == pytest.approx(both.std(axis=0))


def test_workers_deltas_reach_the_master_and_back() -> None:
    rng = np.random.default_rng(1)
    master, worker_a, worker_b = MeanStdFilter((2,)), MeanStdFilter((2,)), MeanStdFilter((2,))
    data_a, data_b = rng.normal(5, 1, size=(40, 2)), rng.normal(-5, 1, size=(60, 2))
    worker_a(data_a)
    worker_b(data_b)
    master.apply_delta(worker_a.take_delta())
    master.apply_delta(worker_b.take_delta())
    both = np.concatenate([data_a, data_b])
    assert master.stats.mean == pytest.approx(both.mean(axis=0))
    worker_a.set_state(master.get_state())
    assert worker_a.take_delta().count == 0  # the delta restarts after each sync
    normalised = worker_a(both, update=False)
    assert normalised.mean(axis=0) == pytest.approx([0.0, 0.0], abs=1e-6)
    assert normalised.std(axis=0) == pytest.approx([1.0, 1.0], abs=1e-4)


def test_state_round_trips_through_bytes() -> None:
    stats = RunningStats((2,))
    stats.push_batch(np.array([[1.0, 2.0], [3.0, 6.0]]))
    restored = stats_from_bytes(stats_to_bytes(stats))
    assert restored is not None
    assert restored.count == 2 and restored.mean.tolist() == [2.0, 4.0] and restored.m2.tolist() == [2.0, 8.0]
    assert stats_from_bytes(stats_to_bytes(None)) is None
