"""Compact replay: frames stored once in their own dtype, next_obs never copied, stacks rebuilt at sample
time. Every check compares against a plain list-of-transitions n-step builder (`reference_transitions`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from kuberl.api.hyperparams import DQNParams
from kuberl.trainer.replay.buffers import PrioritizedReplayBuffer, UniformReplayBuffer
from kuberl.trainer.replay.frames import NStepRows, encode_frames, frame_stack_depth
from kuberl.trainer.replay.nstep import batch_priorities, compact_transitions, local_priorities, nstep_targets
from kuberl.trainer.sampling.env_groups import EnvGroup
from kuberl.trainer.sampling.policies import QPolicyFactory
from kuberl.trainer.sampling.rollout_worker import RolloutWorker, WorkerConfig
from kuberl_testing.fragments import StackedStreams, assert_matches_reference, reference_transitions
from kuberl_testing.image_envs import StackedBeacon

GAMMA = 0.9


def encode(data: dict[str, np.ndarray], *, n: int, stack: int):
    returns, discount, last = nstep_targets(data["rewards"], data["terminateds"], data["truncateds"], gamma=GAMMA, n=n)
    rows = NStepRows.select(data["valid"], returns, discount, last)
    return encode_frames(data["obs"], data["next_obs"], data["actions"], rows, stack)


@pytest.mark.parametrize("same_step", [True, False], ids=["same-step-autoreset", "next-step-autoreset"])
@pytest.mark.parametrize("padding", ["reset", "zero"])
@pytest.mark.parametrize("n", [1, 3, 5])
def test_random_stacked_trajectories_decode_to_the_reference(same_step: bool, padding: str, n: int) -> None:
    streams = StackedStreams(4, 4, (3, 5), seed=n, padding=padding, same_step=same_step, p_end=0.15, levels=3)
    for _ in range(4):  # later fragments start mid-episode: their first stacks hold older frames
        data = streams.fragment(13)
        compact = encode(data, n=n, stack=4)
        assert_matches_reference(compact.decode(), reference_transitions(data, gamma=GAMMA, n=n))
        assert compact.frames.dtype == np.uint8 and compact.frames.shape[1:] == (3, 5)


def test_unstacked_vectors_store_each_observation_once() -> None:
    streams = StackedStreams(3, 1, (4,), seed=0, same_step=False, dtype=np.float32)
    data = streams.fragment(20)
    compact = encode(data, n=3, stack=1)
    assert_matches_reference(compact.decode(), reference_transitions(data, gamma=GAMMA, n=3))
    # one frame per step and env, plus one per episode end (its reset obs): next_obs is no second copy
    episode_ends = int((data["terminateds"] | data["truncateds"]).sum())
    assert len(compact.frames) <= 20 * 3 + 3 + episode_ends


def test_a_hand_made_fragment_frame_by_frame() -> None:
    """One env, stack 2, frames are single numbers; the episode terminates at step 1, the next is truncated at 3."""
    a, b, c, r, d = ([[v]] for v in (1, 2, 3, 7, 8))
    obs = np.array([[a, a], [a, b], [r, r], [r, d]], dtype=np.uint8)[:, None]  # [T=4, E=1, 2, 1, 1]
    next_obs = np.array([[a, b], [b, c], [r, d], [d, d]], dtype=np.uint8)[:, None]
    data = {
        "obs": obs, "next_obs": next_obs, "actions": np.array([[0], [1], [2], [3]]),
        "rewards": np.array([[1.0], [2.0], [3.0], [4.0]], dtype=np.float32),
        "terminateds": np.array([[False], [True], [False], [False]]),
        "truncateds": np.array([[False], [False], [False], [True]]), "valid": np.ones((4, 1), dtype=bool),
    }
    compact = encode(data, n=3, stack=2)
    # frames: a (padding shares it), b, c (the final frame), r (reset, shared by its padding), d, d again
    assert [int(f[0, 0]) for f in compact.frames] == [1, 2, 3, 7, 8, 8]
    assert compact.obs_frames.tolist() == [[0, 0], [0, 1], [3, 3], [3, 4]]
    assert compact.next_frames.tolist() == [[1, 2], [1, 2], [4, 5], [4, 5]]
    assert compact.reward.tolist() == pytest.approx([1 + 0.9 * 2, 2, 3 + 0.9 * 4, 4])
    assert compact.discount.tolist() == pytest.approx([0.0, 0.0, 0.81, 0.9])
    assert_matches_reference(compact.decode(), reference_transitions(data, gamma=GAMMA, n=3))


def _worker(same_step: bool, **env_config) -> RolloutWorker:
    config = WorkerConfig(env_id="kuberl_testing.image_envs:StackedBeacon", env_config=env_config, num_envs=3,
                          fragment_length=16, seed=4)
    policy = QPolicyFactory.from_params(DQNParams(model={"conv": [[4, 3, 1]], "hidden": [8]}))
    worker = RolloutWorker(config, policy, worker_index=1)
    if not same_step:  # the same envs under Gymnasium's other autoreset convention
        worker.env.close()
        env = gym.vector.SyncVectorEnv([lambda: StackedBeacon(**env_config)] * 3, autoreset_mode=AutoresetMode.NEXT_STEP)
        group = EnvGroup(env, slice(0, 3))
        group.obs, _ = env.reset(seed=4)
        group.raw_obs = group.obs
        worker.groups = [group]
        worker.same_step_reset = False
    return worker


@pytest.mark.parametrize("same_step", [True, False], ids=["same-step-autoreset", "next-step-autoreset"])
def test_frame_stacked_env_rollouts_decode_to_what_the_agent_saw(same_step: bool) -> None:
    """Real FrameStackObservation stacks through a rollout worker: episodes start with the reset frame repeated."""
    worker = _worker(same_step, size=8, max_steps=7, mistakes=4)
    assert frame_stack_depth(worker.env) == 4
    starts = 0
    for _ in range(3):
        batch = worker.sample()
        data = batch.data
        assert data["obs"].dtype == np.uint8
        compact, rows = compact_transitions(batch, gamma=GAMMA, n_step=3, stack_depth=4)
        assert_matches_reference(compact.decode(), reference_transitions(data, gamma=GAMMA, n=3))
        first_stacks = data["obs"][rows.step, rows.env]
        starts += int((first_stacks == first_stacks[:, :1]).all(axis=(1, 2, 3)).sum())  # [r, r, r, r]
        assert len(compact.frames) < 0.5 * 4 * 2 * len(compact)  # far fewer than obs + next_obs stacks
    worker.stop()
    assert starts >= 3  # episode starts were among them


def test_frame_stack_depth_looks_through_vector_envs_and_space_keeping_wrappers() -> None:
    stacked = StackedBeacon(stack=3, size=8)
    assert frame_stack_depth(stacked) == 3
    assert frame_stack_depth(gym.wrappers.RecordEpisodeStatistics(stacked)) == 3
    assert frame_stack_depth(gym.wrappers.FlattenObservation(StackedBeacon(size=8))) == 1  # the stack is hidden
    assert frame_stack_depth(gym.make("CartPole-v1")) == 1
    assert frame_stack_depth(gym.vector.SyncVectorEnv([lambda: StackedBeacon(stack=2, size=8)])) == 2


def _filled_buffer(buffer_class, capacity: int, fragments: int, *, seed: int = 0, **options):
    """A buffer fed `fragments` fragments of 3 interleaved envs; the reference row of every id added."""
    streams = StackedStreams(3, 4, (2, 3), seed=seed, p_end=0.2, levels=4)
    buffer = buffer_class(capacity, seed=seed, frames_per_transition=1.25, **options)
    reference: list[tuple] = []
    for _ in range(fragments):
        data = streams.fragment(8)
        compact = encode(data, n=3, stack=4)
        buffer.add(compact, priorities=np.abs(compact.reward) + 0.1 if buffer.prioritized else None)
        reference.extend(reference_transitions(data, gamma=GAMMA, n=3))
    return buffer, reference


def test_ring_wraparound_keeps_only_transitions_whose_frames_are_still_there() -> None:
    buffer, reference = _filled_buffer(PrioritizedReplayBuffer, 50, 30, alpha=1.0)
    storage = buffer.storage
    assert storage.adds == len(reference) > 10 * 50  # wrapped many times
    live = np.arange(storage.oldest, storage.adds)
    assert 0 < len(live) == len(buffer) <= 50
    assert_matches_reference(storage.read(live % 50), [reference[i] for i in live])
    # a slot whose transition lost its frames (the frame ring moved on) has no priority mass
    live_slots = set((live % 50).tolist())
    for slot in range(50):
        assert (buffer.sum_tree[slot] > 0) == (slot in live_slots), slot
    sample = buffer.sample(2000)
    assert set(sample["ids"].tolist()) <= set(live.tolist())
    assert_matches_reference(sample, [reference[i] for i in sample["ids"]])


def test_priority_updates_for_transitions_that_lost_their_frames_are_dropped() -> None:
    buffer, _ = _filled_buffer(PrioritizedReplayBuffer, 50, 8, alpha=1.0)
    old = np.arange(buffer.storage.oldest, buffer.storage.oldest + 5)
    assert buffer.update_priorities(old, np.full(5, 1e6)) == 0  # still live: they take the priority
    streams = StackedStreams(3, 4, (2, 3), seed=99, p_end=0.2, levels=4)
    for _ in range(20):  # push them out of the frame ring
        data = streams.fragment(8)
        buffer.add(encode(data, n=3, stack=4), priorities=np.ones(int(data["valid"].sum())))
    assert buffer.update_priorities(old, np.full(5, 1e6)) == 5
    assert set(buffer.sample(500)["ids"].tolist()).isdisjoint(old.tolist())


def test_uniform_sampling_draws_only_live_transitions() -> None:
    buffer, reference = _filled_buffer(UniformReplayBuffer, 40, 25, seed=3)
    sample = buffer.sample(3000)
    live = set(range(buffer.storage.oldest, buffer.storage.adds))
    assert set(sample["ids"].tolist()) == live  # every live one, nothing else
    assert_matches_reference(sample, [reference[i] for i in sample["ids"]])
    assert (sample["weights"] == 1).all()


def test_a_fragment_larger_than_the_ring_keeps_its_newest_transitions() -> None:
    streams = StackedStreams(2, 4, (2, 2), seed=5, p_end=0.05)
    data = streams.fragment(40)
    buffer = PrioritizedReplayBuffer(30, seed=0, frames_per_transition=1.0)
    buffer.add(encode(data, n=3, stack=4))
    reference = reference_transitions(data, gamma=GAMMA, n=3)
    live = np.arange(buffer.storage.oldest, buffer.storage.adds)
    assert 0 < len(live) <= 30
    assert_matches_reference(buffer.storage.read(live % 30), [reference[i] for i in live])
    assert set(buffer.sample(300)["ids"].tolist()) <= set(live.tolist())


def test_frames_of_another_shape_or_dtype_are_refused() -> None:
    buffer, _ = _filled_buffer(PrioritizedReplayBuffer, 50, 1)
    other = StackedStreams(3, 4, (2, 4), seed=1).fragment(8)
    with pytest.raises(ValueError, match="differ"):
        buffer.add(encode(other, n=3, stack=4))
    with pytest.raises(ValueError, match="FrameTransitions"):
        buffer.add({"obs": np.zeros((2, 1)), "action": np.zeros(2)})


@pytest.mark.parametrize("same_step", [True, False], ids=["same-step-autoreset", "next-step-autoreset"])
def test_worker_priorities_reuse_the_acting_pass_and_equal_the_plain_td_errors(same_step: bool, monkeypatch) -> None:
    """Ape-X's initial priorities take max_a Q(next_obs) from the acting pass where the worker acted on that very
    observation; the rest (fragment ends, truncations) take a forward pass. Same numbers as the plain way."""
    worker = _worker(same_step, size=8, max_steps=7, mistakes=4)
    policy = worker.policy
    policy.configure(epsilon=0.3)
    forwarded: list[int] = []
    q_values = policy.q_values
    for _ in range(3):
        batch = worker.sample()
        data = batch.data
        _, rows = compact_transitions(batch, gamma=GAMMA, n_step=3, stack_depth=4)
        monkeypatch.setattr(policy, "q_values", lambda obs: forwarded.append(len(obs)) or q_values(obs))
        got = batch_priorities(policy, batch, rows)
        monkeypatch.setattr(policy, "q_values", q_values)
        plain = local_priorities(policy, {"next_obs": data["next_obs"][rows.last, rows.env], "reward": rows.reward,
                                          "discount": rows.discount, "q_taken": data["q_taken"][rows.step, rows.env]})
        np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
        assert (data["terminateds"] | data["truncateds"]).any()  # the fragments cross episode ends
    assert 0 < sum(forwarded) < 3 * len(rows) / 2
