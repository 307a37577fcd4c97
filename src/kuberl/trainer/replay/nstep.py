"""n-step transitions, the rows replay memory holds, from rollout fragments (pure numpy).

A transition here is (obs, action, reward, next_obs, discount) where `reward` is the discounted
sum of up to n rewards, `next_obs` is the observation to bootstrap from and `discount` is
gamma^m for an m-step transition, or 0 when the episode terminated within those m steps. The
TD target is then simply reward + discount * Q_target(next_obs, argmax_a Q_online(next_obs, a))
(see `kuberl.trainer.algorithms.dqn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kuberl.trainer.replay.buffers import Batch
from kuberl.trainer.replay.frames import FrameTransitions, NStepRows, encode_frames

if TYPE_CHECKING:
    from kuberl.trainer.sampling.policies import QPolicy
    from kuberl.trainer.sampling.rollout_worker import SampleBatch

TRANSITION_KEYS = ("obs", "action", "reward", "next_obs", "discount")


def nstep_targets(
    rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, *, gamma: float, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(returns, discount, last), each [T, E]: the n-step return of every step, its bootstrap
    discount, and the step whose next observation it bootstraps from.

    A transition stops early at the end of its episode or of the fragment, bootstrapping from
    wherever it stopped: a truncated episode (time limit) bootstraps, a terminated one does not
    (discount 0).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rewards = np.asarray(rewards, dtype=np.float64)
    steps, envs = rewards.shape[:2]
    terminated = np.asarray(terminated, dtype=bool)
    ended = terminated | np.asarray(truncated, dtype=bool)
    returns = np.zeros((steps, envs))
    discount = np.ones((steps, envs))
    last = np.repeat(np.arange(steps)[:, None], envs, axis=1)  # the step each transition bootstraps after
    alive = np.ones((steps, envs), dtype=bool)
    start = np.arange(steps)
    for k in range(n):
        idx = start + k
        in_fragment = (idx < steps)[:, None]
        take = alive & in_fragment
        row = np.minimum(idx, steps - 1)
        returns += np.where(take, discount * rewards[row], 0.0)
        discount = np.where(take, discount * gamma, discount)
        last = np.where(take, row[:, None], last)
        hit_terminal = take & terminated[row]
        discount = np.where(hit_terminal, 0.0, discount)
        alive = take & ~ended[row]
    return returns, discount, last


def nstep_transitions(fragment: dict[str, np.ndarray], *, gamma: float, n: int) -> Batch:
    """n-step transitions from a fragment of T steps of E envs, flattened to T*E rows (time-major).

    `fragment` holds a sample batch's arrays, [T, E, ...] (obs, actions, rewards, next_obs, terminateds,
    truncateds): `next_obs[t]` is the true observation after step t (the final one when the episode ended
    there, never the reset one). See `nstep_targets` for where a transition stops.
    """
    obs, actions, next_obs = fragment["obs"], fragment["actions"], fragment["next_obs"]
    returns, discount, last = nstep_targets(fragment["rewards"], fragment["terminateds"], fragment["truncateds"],
                                            gamma=gamma, n=n)
    env_index = np.broadcast_to(np.arange(returns.shape[1]), returns.shape)
    return {
        "obs": _flatten(np.asarray(obs)),
        "action": _flatten(np.asarray(actions)),
        "reward": returns.reshape(-1).astype(np.float32),
        "next_obs": _flatten(np.asarray(next_obs)[last, env_index]),
        "discount": discount.reshape(-1).astype(np.float32),
    }


def _flatten(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def compact_transitions(batch: SampleBatch, *, gamma: float, n_step: int,
                        stack_depth: int = 1) -> tuple[FrameTransitions, NStepRows]:
    """The n-step transitions of a rollout batch's valid rows in the compact form replay stores,
    and the rows they came from (for priorities)."""
    data = batch.data
    returns, discount, last = nstep_targets(data["rewards"], data["terminateds"], data["truncateds"],
                                            gamma=gamma, n=n_step)
    rows = NStepRows.select(data["valid"], returns, discount, last)
    return encode_frames(data["obs"], data["next_obs"], data["actions"], rows, stack_depth), rows


def local_priorities(policy: QPolicy, transitions: Batch) -> np.ndarray:
    """|n-step TD error| under the worker's own network (Ape-X: actors prioritise what they add)."""
    next_q = policy.q_values(transitions["next_obs"]).max(axis=1)
    return _td_priorities(transitions["reward"], transitions["discount"], next_q, transitions["q_taken"])


def _td_priorities(reward: np.ndarray, discount: np.ndarray, next_q: np.ndarray, q_taken: np.ndarray) -> np.ndarray:
    return np.abs(reward + discount * next_q - q_taken).astype(np.float32)


def batch_priorities(policy: QPolicy, batch: SampleBatch, rows: NStepRows) -> np.ndarray:
    """`local_priorities` of the transitions `rows` of a rollout batch (its policy kept q_taken and q_max).

    The bootstrap value max_a Q(next_obs) is mostly known already: when a transition's next observation is
    exactly the observation the worker acted on one step later, the acting pass computed it (`q_max`, same
    weights within a fragment). Only the rest (the fragment's last step, a truncation's final observation)
    takes a forward pass, and terminated transitions (discount 0) need none; on pixels this halves the
    worker's network time.
    """
    data = batch.data
    next_obs = data["next_obs"][rows.last, rows.env]
    next_q = np.zeros(len(rows), dtype=np.float32)
    known = np.zeros(len(rows), dtype=bool)
    if "q_max" in data:
        follow = rows.last + 1
        inside = np.flatnonzero(follow < len(data["obs"]))
        acted_on = data["obs"][follow[inside], rows.env[inside]]
        same = (acted_on == next_obs[inside]).reshape(len(inside), -1).all(axis=1)
        reuse = inside[same]
        next_q[reuse] = data["q_max"][follow[reuse], rows.env[reuse]]
        known[reuse] = True
    needed = ~known & (rows.discount != 0)
    if needed.any():
        next_q[needed] = policy.q_values(next_obs[needed]).max(axis=1)
    return _td_priorities(rows.reward, rows.discount, next_q, data["q_taken"][rows.step, rows.env])
