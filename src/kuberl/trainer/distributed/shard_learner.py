"""The learner actor of the replay-shard topology (Ape-X DQN; SAC with replay shards): an off-policy learner
on batches from every replay shard, never waiting on one.

It keeps `prefetch` sample requests outstanding per shard, deals each reply into train batches that each span
the whole shard (`split_minibatches`), runs the algorithm's `OffPolicyLearner.update` (DQN's `QLearner`, SAC's
`SACLearner`) on each with importance weights in its own thread, sends the new priorities back and publishes
weights through the object store every `weight_sync_interval` updates.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from kuberl.api.hyperparams import ApexDQNParams, SACParams
from kuberl.api.types import LearnerSpec
from kuberl.trainer.distributed.errors import actor_died_errors
from kuberl.trainer.iteration_result import Scalar
from kuberl.trainer.learners.files import SHARD_REPLAY_FILE
from kuberl.trainer.learning.device import Bf16Setting, configure_cpu_threads, learner_device
from kuberl.trainer.learning.schedules import (
    OptimizerRates,
    optimizer_rates,
    priority_beta,
    set_optimizer_rates,
)

log = logging.getLogger(__name__)

BATCHES_PER_REQUEST = 4  # train batches per shard round trip: fewer, larger messages for the learner
SHARD_STATS_TIMEOUT_S = 10.0


class OffPolicyLearner(Protocol):
    """What the shard learner drives: an update step that gives priorities back, weights for the rollout
    workers, and checkpoint files."""

    updates: int

    def update(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """One update on a replay sample (obs, action, reward, next_obs, discount, weights); |TD errors| back."""
        ...

    def weights(self) -> dict[str, np.ndarray]: ...

    def take_stats(self) -> dict[str, Scalar]: ...

    def state_files(self) -> dict[str, bytes]: ...

    def load_state_files(self, files: dict[str, bytes]) -> None: ...


ShardParams = ApexDQNParams | SACParams
# (observation_space, action_space, params, device, bf16) -> the learner; a module-level function, so it pickles.
LearnerBuilder = Callable[[gym.Space, gym.Space, Any, torch.device, Bf16Setting], OffPolicyLearner]


def split_minibatches(sample: dict[str, np.ndarray], size: int,
                      rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """A shard's reply (a stratified sample of k * `size` rows, in stratum order) dealt into k train batches of
    `size`, each a stratified sample of the whole buffer: stratum group j (rows j*k .. j*k+k-1, the j-th of `size`
    equal slices of the priority mass) gives each train batch one of its rows, in a random order."""
    k, rest = divmod(len(sample["ids"]), size)
    if rest:
        raise ValueError(f"a sample of {len(sample['ids'])} rows is no whole number of train batches of {size}")
    deal = rng.permuted(np.arange(k * size).reshape(size, k), axis=1).T  # row i: the rows of train batch i
    return [{key: values[rows] for key, values in sample.items()} for rows in deal]


class ShardLearner:
    """The learner's loop runs in its own thread; the actor's other methods answer meanwhile."""

    def __init__(self, build: LearnerBuilder, observation_space: gym.Space, action_space: gym.Space,
                 params: ShardParams, learner: LearnerSpec, shards: list[Any]):
        """`learner`: spec.learner, the device the learner trains on (gpus), how (bf16) and torch's threads."""
        configure_cpu_threads(learner.threads)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        self.params = params
        self.request_size = params.train_batch_size * BATCHES_PER_REQUEST
        self.rng = np.random.default_rng(params.seed)
        self.learner = build(observation_space, action_space, params, learner_device(learner.gpus), learner.bf16)
        self.lock = threading.Lock()  # the loop's update step vs. checkpoint reads and writes
        self.shards: list[Any] = list(shards)
        self.shard_adds = [0] * len(shards)
        self.retired_adds = 0
        self.resumed_adds = 0  # added before the checkpoint this run resumed from (beta anneals on all of them)
        self.waiting_for_data = True
        self.pending: list[deque[Any]] = [deque() for _ in shards]
        self.version = 0
        self.weights_ref: Any = None
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.error: str | None = None
        self._reset_stats()
        self._publish()

    def _reset_stats(self) -> None:
        self.stats_since = time.perf_counter()
        self.stats_updates = self.learner.updates
        self.depth_sum = 0
        self.depth_count = 0
        self.starved = 0
        self.throttled_seconds = 0.0
        self.lost_samples = 0
        self.empty_replies = 0
        self.update_seconds = 0.0

    def _publish(self) -> None:
        import ray

        self.weights_ref = ray.put(self.learner.weights())
        self.version += 1

    # -- called by others --------------------------------------------------------------------------
    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="shard-learner", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        with self.lock:
            # Publish the updates since the last broadcast: a stopped algorithm acts with the model it saves.
            self._publish()

    def latest_weights(self, known_version: int) -> tuple[int, list[Any]]:
        """(version, [weights ref]) when newer than `known_version`, else (version, [])."""
        if self.version > known_version:
            return self.version, [self.weights_ref]
        return self.version, []

    def set_shard(self, index: int, shard: Any) -> None:
        """A replacement for a lost shard (empty: it starts again from no transitions)."""
        self.shards[index] = shard
        self.retired_adds += self.shard_adds[index]  # adds stay a running total across replacements
        self.shard_adds[index] = 0
        self.pending[index] = deque()

    def progress(self) -> tuple[int, bool]:
        """(updates so far, whether the learner is waiting for more transitions)."""
        return self.learner.updates, self.waiting_for_data

    def take_stats(self) -> dict[str, Scalar]:
        now = time.perf_counter()
        elapsed = now - self.stats_since
        stats = self.learner.take_stats()
        stats.update(
            updatesPerSecond=(self.learner.updates - self.stats_updates) / elapsed if elapsed > 0 else 0.0,
            weightSyncs=self.version,
            queueDepthMean=self.depth_sum / self.depth_count if self.depth_count else None,
            queueEmptyFraction=self.starved / self.depth_count if self.depth_count else None,
            throttledSeconds=self.throttled_seconds,
            busyFraction=self.update_seconds / elapsed if elapsed > 0 else 0.0,
            samplesDropped=self.lost_samples,
            emptyReplies=self.empty_replies,
            replayAdds=self._adds(),
            beta=self._beta(),
            error=self.error,
        )
        self._reset_stats()
        return stats

    def state_files(self) -> dict[str, bytes]:
        with self.lock:
            files = self.learner.state_files()
        files[SHARD_REPLAY_FILE] = json.dumps({"adds": self._run_adds()}).encode()
        return files

    def load_state_files(self, files: dict[str, bytes]) -> int:
        with self.lock:
            self.learner.load_state_files(files)
            self._publish()
        if SHARD_REPLAY_FILE in files:
            self.resumed_adds = int(json.loads(files[SHARD_REPLAY_FILE])["adds"])
        return self.version

    def learning_rates(self) -> OptimizerRates:
        with self.lock:
            return optimizer_rates(self.learner)

    def set_learning_rates(self, rates: OptimizerRates) -> None:
        """Set back what `learning_rates` gave (a loaded optimizer state brings its run's rates)."""
        with self.lock:
            set_optimizer_rates(self.learner, rates)

    # -- the loop ----------------------------------------------------------------------------------
    def _beta(self) -> float:
        p = self.params
        return priority_beta(self._run_adds(), p.priority_beta, p.priority_beta_timesteps, p.priority_beta_final)

    def _adds(self) -> int:
        """Transitions added to replay since this learner started (its shards hold no older ones)."""
        return self.retired_adds + sum(self.shard_adds)

    def _run_adds(self) -> int:
        """Transitions added to replay over the run, those before the checkpoint it resumed from included."""
        return self.resumed_adds + self._adds()

    def _may_sample(self) -> bool:
        """Learning has started and the learner is not ahead of the replay ratio bound."""
        adds = self._adds()
        if adds < max(self.params.learning_starts, self.params.train_batch_size):
            return False
        ratio = self.params.max_replay_ratio
        sampled = self.learner.updates * self.params.train_batch_size + sum(map(len, self.pending)) * self.request_size
        return ratio is None or sampled < ratio * adds

    def _refresh_adds(self) -> None:
        import ray

        for index, shard in enumerate(self.shards):
            if shard is None:
                continue
            try:
                self.shard_adds[index] = ray.get(shard.stats.remote(), timeout=SHARD_STATS_TIMEOUT_S)["adds"]
            except actor_died_errors():
                self._lose_shard(index)
            except ray.exceptions.GetTimeoutError:
                pass

    def _lose_shard(self, index: int) -> None:
        self.lost_samples += len(self.pending[index]) * self.request_size
        self.pending[index] = deque()
        self.shards[index] = None

    def _top_up(self) -> None:
        beta = self._beta()
        for index, shard in enumerate(self.shards):
            if shard is None:
                continue
            while len(self.pending[index]) < self.params.prefetch and self._may_sample():
                self.pending[index].append(shard.sample.remote(self.request_size, beta, self.params.train_batch_size))

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - reported to the driver, which fails the run
            self.error = traceback.format_exc()
            log.error("the shard learner failed:\n%s", self.error)

    def _loop(self) -> None:
        import ray

        while not self.stopping.is_set():
            self._top_up()
            heads = {q[0]: i for i, q in enumerate(self.pending) if q}
            if not heads:
                self.waiting_for_data = True
                waited = time.perf_counter()
                time.sleep(0.02)
                self._refresh_adds()
                self.throttled_seconds += time.perf_counter() - waited
                continue
            ready, _ = ray.wait(list(heads), num_returns=len(heads), timeout=0)
            self.depth_sum += len(ready)
            self.depth_count += 1
            if not ready:
                self.starved += 1
                ready, _ = ray.wait(list(heads), num_returns=1, timeout=1.0)
            for ref in ready:
                index = heads[ref]
                if not self.pending[index] or self.pending[index][0] is not ref:
                    continue  # the shard was replaced meanwhile
                self.pending[index].popleft()
                try:
                    batch, adds = ray.get(ref)
                except actor_died_errors():
                    self._lose_shard(index)
                    continue
                self.shard_adds[index] = max(self.shard_adds[index], adds)
                if batch is None:  # this shard is still nearly empty: ask again a little later
                    self.waiting_for_data = True
                    self.empty_replies += 1
                    time.sleep(0.01)
                    continue
                self.waiting_for_data = False
                self.shards[index].update_priorities.remote(*self._learn(batch))

    def _learn(self, sample: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Train batches from one shard reply, one update each; (ids, |TD errors|) of all their rows."""
        started = time.perf_counter()
        ids, td_errors = [], []
        for minibatch in split_minibatches(sample, self.params.train_batch_size, self.rng):
            with self.lock:
                td_errors.append(self.learner.update(minibatch))
                if self.learner.updates % self.params.weight_sync_interval == 0:
                    self._publish()
            ids.append(minibatch["ids"])
        self.update_seconds += time.perf_counter() - started
        return np.concatenate(ids), np.concatenate(td_errors)
