"""Sum/min-tree invariants, proportional sampling, importance weights and ring wraparound."""

from __future__ import annotations

import numpy as np
import pytest

from kuberl.trainer.replay.buffers import (
    PrioritizedReplayBuffer,
    UniformReplayBuffer,
    importance_weights,
    make_replay_buffer,
    split_capacity,
)
from kuberl.trainer.replay.segment_tree import MinTree, SumTree


def _batch(start: int, n: int) -> dict[str, np.ndarray]:
    values = np.arange(start, start + n)
    return {"obs": np.stack([values, -values], axis=1).astype(np.float32), "action": values.astype(np.int64)}


@pytest.mark.parametrize("capacity", [1, 2, 7, 64, 100])
def test_every_internal_node_is_the_sum_and_min_of_its_children_after_random_updates(capacity: int) -> None:
    rng = np.random.default_rng(0)
    sums, mins = SumTree(capacity), MinTree(capacity)
    for _ in range(50):
        idx = rng.integers(0, capacity, rng.integers(1, 20))
        vals = rng.random(idx.size) * 10
        sums.update(idx, vals)
        mins.update(idx, vals)
    for node in range(1, sums.leaves):
        assert sums.nodes[node] == pytest.approx(sums.nodes[2 * node] + sums.nodes[2 * node + 1])
        assert mins.nodes[node] == min(mins.nodes[2 * node], mins.nodes[2 * node + 1])
    leaves = sums[np.arange(capacity)]
    assert sums.total == pytest.approx(leaves.sum())
    touched = leaves > 0
    assert mins.min == pytest.approx(leaves[touched].min())


def test_repeated_index_in_one_update_keeps_the_last_value() -> None:
    tree = SumTree(8)
    tree.update(np.array([3, 3, 5]), np.array([1.0, 4.0, 2.0]))
    assert tree[3] == 4.0
    assert tree.total == 6.0


def test_find_prefix_sum_matches_a_linear_scan() -> None:
    rng = np.random.default_rng(1)
    tree = SumTree(37)
    values = rng.random(37)
    values[[4, 5, 20]] = 0.0  # empty slots are never found
    tree.update(np.arange(37), values)
    targets = rng.random(2000) * tree.total
    expected = np.searchsorted(np.cumsum(values), targets, side="right")
    assert np.array_equal(tree.find_prefix_sum(targets), expected)
    # a target at the very top, after round-off, still lands on a non-empty leaf
    top = tree.find_prefix_sum(np.array([tree.total, np.nextafter(tree.total, 0)]))
    assert (values[top] > 0).all()


def test_out_of_range_index_is_refused() -> None:
    with pytest.raises(IndexError):
        SumTree(4).update(np.array([4]), np.array([1.0]))


def test_sampling_frequencies_match_priorities_chi_square() -> None:
    buffer = PrioritizedReplayBuffer(8, alpha=1.0, eps=0.0, seed=7)
    td = np.array([1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 5.0, 8.0])
    buffer.add(_batch(0, 8), priorities=td)
    draws = 40_000
    counts = np.zeros(8)
    for _ in range(draws // 200):
        sample = buffer.sample(200)
        counts += np.bincount(sample["action"], minlength=8)
    expected = draws * td / td.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # chi-square with 7 degrees of freedom: 24.3 is the 99.9% quantile. Stratification only lowers it.
    assert chi2 < 24.3, (counts, expected)
    assert buffer.stats()["samples"] == draws


def test_alpha_flattens_priorities() -> None:
    buffer = PrioritizedReplayBuffer(2, alpha=0.5, eps=0.0, seed=3)
    buffer.add(_batch(0, 2), priorities=np.array([1.0, 16.0]))
    assert buffer.sum_tree[np.array([0, 1])] == pytest.approx([1.0, 4.0])
    assert buffer.stats()["meanPriority"] == pytest.approx(2.5)


def test_importance_weights_against_hand_values() -> None:
    # priorities 1, 2, 3, 4 with alpha 1, eps 0: P = 0.1, 0.2, 0.3, 0.4; N = 4, beta = 0.5
    # w_i = (4 P_i)^-0.5 / (4 * 0.1)^-0.5 = sqrt(0.1 / P_i)
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    expected = [1.0, np.sqrt(0.5), np.sqrt(1 / 3), 0.5]
    assert importance_weights(probs, 0.1, 0.5) == pytest.approx(expected, rel=1e-6)
    buffer = PrioritizedReplayBuffer(4, alpha=1.0, eps=0.0, seed=0)
    buffer.add(_batch(0, 4), priorities=np.array([1.0, 2.0, 3.0, 4.0]))
    sample = buffer.sample(64, beta=0.5)
    assert sample["weights"] == pytest.approx(np.array(expected)[sample["action"]], rel=1e-6)
    assert sample["weights"].max() <= 1.0
    assert buffer.sample(16, beta=0.0)["weights"] == pytest.approx(np.ones(16))


def test_update_priorities_changes_sampling_and_drops_overwritten_ids() -> None:
    buffer = PrioritizedReplayBuffer(4, alpha=1.0, eps=1e-9, seed=0)
    buffer.add(_batch(0, 4), priorities=np.ones(4))
    ids = buffer.sample(4)["ids"]
    buffer.update_priorities(np.array([0, 1, 2, 3]), np.array([0.0, 0.0, 0.0, 5.0]))
    assert set(buffer.sample(32)["action"].tolist()) == {3}
    buffer.add(_batch(4, 2))  # overwrites slots 0 and 1 (ids 0, 1)
    dropped = buffer.update_priorities(np.array([0, 1, 4]), np.array([9.0, 9.0, 2.0]))
    assert dropped == 2
    assert buffer.sum_tree[0] == pytest.approx(2.0)  # id 4 lives in slot 0 now
    assert ids.dtype == np.int64


def test_wraparound_keeps_the_newest_transitions() -> None:
    buffer = PrioritizedReplayBuffer(5, seed=0)
    buffer.add(_batch(0, 3))
    buffer.add(_batch(3, 4))  # 7 added into 5 slots
    assert len(buffer) == 5
    assert sorted(buffer.storage.fields["action"].tolist()) == [2, 3, 4, 5, 6]
    assert buffer.stats()["adds"] == 7
    buffer.add(_batch(100, 12))  # a batch bigger than the buffer keeps its last 5 rows
    assert sorted(buffer.storage.fields["action"].tolist()) == [107, 108, 109, 110, 111]
    sample = buffer.sample(50)
    assert np.array_equal(sample["obs"][:, 0], sample["action"].astype(np.float32))
    assert (sample["ids"] - 7 == sample["action"] - 100).all()


def test_new_transitions_without_priorities_get_the_max_priority() -> None:
    buffer = PrioritizedReplayBuffer(4, alpha=1.0, eps=0.0, seed=0)
    buffer.add(_batch(0, 2), priorities=np.array([3.0, 1.0]))
    buffer.add(_batch(2, 1))
    assert buffer.sum_tree[2] == pytest.approx(3.0)


def test_uniform_buffer_has_the_same_api() -> None:
    buffer = make_replay_buffer(10, prioritized=False, seed=2)
    assert isinstance(buffer, UniformReplayBuffer)
    buffer.add(_batch(0, 15), priorities=np.ones(15))
    sample = buffer.sample(1000)
    assert set(sample["action"].tolist()) == set(range(5, 15))
    assert (sample["weights"] == 1).all()
    assert buffer.update_priorities(sample["ids"], np.ones(1000)) == 0
    assert buffer.stats() == {"size": 10, "capacity": 10, "adds": 15, "samples": 1000}


def test_bad_input_is_refused() -> None:
    buffer = PrioritizedReplayBuffer(4)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(1)
    with pytest.raises(ValueError, match="different lengths"):
        buffer.add({"obs": np.zeros((2, 1)), "action": np.zeros(3)})
    buffer.add(_batch(0, 2))
    with pytest.raises(ValueError, match="differ"):
        buffer.add({"obs": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="shape"):
        buffer.add(_batch(0, 2), priorities=np.ones(3))


def test_split_capacity() -> None:
    assert split_capacity(10, 3) == [4, 3, 3]
    assert sum(split_capacity(1_000_000, 7)) == 1_000_000
