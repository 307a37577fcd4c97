"""The driver's side of evaluation: when to evaluate, where (in process or on Ray actors), and the
results in order.

With `workers: 0` an evaluation plays in the learner's process and is ready at once. With W > 0
it is launched on W actors (episodes split between them) and training goes on; `ready()` hands
back finished evaluations at later iterations. At most one evaluation runs at a time: launching
the next one while the previous is still playing waits for it first, so evaluations happen at
exactly the iterations asked for, and training only waits when evaluating K episodes takes
longer than N training iterations.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kuberl.trainer.evaluation.episodes import PlayedEpisodes
from kuberl.trainer.iteration_result import EvaluationResult
from kuberl.trainer.sampling.seeds import evaluation_policy_seed

if TYPE_CHECKING:
    from kuberl.api.types import EvaluationSpec
    from kuberl.trainer.algorithms.base import Algorithm

log = logging.getLogger(__name__)


@dataclass
class Evaluation:
    """One finished evaluation: the `evaluation` object of results.jsonl, its video, and (with
    checkpoint.keepBest) the state of the policy it evaluated."""

    summary: EvaluationResult
    video: bytes | None = None
    state: dict[str, bytes] | None = None

    @property
    def iteration(self) -> int:
        return self.summary.iteration

    @property
    def return_mean(self) -> float | None:
        return self.summary.return_mean


@dataclass
class _Running:
    iteration: int
    timesteps: int
    started: float
    refs: list[Any] = field(default_factory=list)
    state: dict[str, bytes] | None = None


class Evaluator:
    def __init__(self, spec: EvaluationSpec, algo: Algorithm, *,
                 snapshot: Callable[[], dict[str, bytes]] | None = None) -> None:
        self.spec = spec
        self.algo = algo
        self.snapshot = snapshot  # the full state for keepBest, taken when an evaluation starts
        self.seeds = algo.evaluation_seeds(spec.episodes)
        self.launched = 0
        self.last_iteration: int | None = None
        self._actors: list[Any] = []
        self._running: _Running | None = None
        self._done: list[Evaluation] = []

    def due(self, iteration: int) -> bool:
        return iteration % self.spec.interval == 0 and iteration != self.last_iteration

    def _records_video(self) -> bool:
        video = self.spec.video
        return video is not None and (self.launched - 1) % video.every_evaluations == 0

    def launch(self, iteration: int, timesteps: int) -> None:
        """Evaluate the policy of `iteration` now (workers: 0) or start it on the actors."""
        if self._running is not None:
            self._collect(block=True)
        self.launched += 1
        self.last_iteration = iteration
        state = self.snapshot() if self.snapshot is not None else None
        record = self._records_video()
        started = time.perf_counter()
        if self.spec.workers == 0:
            played = self.algo.play(self.seeds, explore=self.spec.explore, env_config=self.spec.env_config,
                                    record_first=record)
            self._finish(_Running(iteration, timesteps, started, state=state), played)
            return
        import ray

        policy_factory, weights = self.algo.evaluation_policy()
        actors = self._ensure_actors(policy_factory)  # first: it starts Ray on loopback where the run has none yet
        weights_ref = ray.put(weights)
        filter_state = self.algo.obs_filter.get_state()
        settings = self.algo.evaluation_settings()
        refs = []
        for index, actor in enumerate(actors):
            seeds = self.seeds[index::len(actors)]
            if seeds:
                refs.append(actor.evaluate.remote(weights_ref, filter_state, seeds, explore=self.spec.explore,
                                                  record_first=record and index == 0, settings=settings))
        self._running = _Running(iteration, timesteps, started, refs, state)

    def _ensure_actors(self, policy_factory: Any) -> list[Any]:
        if not self._actors:
            import ray

            from kuberl.trainer.distributed.ray_runtime import ACTOR_OPTIONS, init_ray
            from kuberl.trainer.evaluation.actor import EvaluationActor, EvaluationWorker

            init_ray()
            # No CPU reservation: evaluation must never wait for rollout workers to give up theirs.
            worker: type[EvaluationActor] = self.algo.evaluation_worker_class() or EvaluationWorker  # a multi-agent run has its own
            actor_class = ray.remote(worker).options(num_cpus=0, max_restarts=0, **ACTOR_OPTIONS)
            make = self.algo.evaluation_env(self.spec.env_config)
            filter_kind = self.algo.params.observation_filter
            self._actors = [actor_class.remote(make, policy_factory, filter_kind,
                                               evaluation_policy_seed(self.algo.params.seed, i))
                            for i in range(self.spec.workers)]
        return self._actors

    def _collect(self, *, block: bool) -> None:
        running = self._running
        if running is None:
            return
        import ray

        if not block:
            ready, _ = ray.wait(running.refs, num_returns=len(running.refs), timeout=0)
            if len(ready) < len(running.refs):
                return
        self._running = None
        try:
            parts: list[PlayedEpisodes] = ray.get(running.refs)
        except Exception as exc:  # noqa: BLE001 - a lost actor costs this evaluation, not the run
            log.warning("evaluation of iteration %d failed (%s); evaluation actors are restarted",
                        running.iteration, exc)
            self._kill_actors()
            return
        self._finish(running, PlayedEpisodes.joined(parts))

    def _finish(self, running: _Running, played: PlayedEpisodes) -> None:
        summary = EvaluationResult.of(running.iteration, running.timesteps, played.returns, played.lengths,
                                      seconds=time.perf_counter() - running.started)
        self._done.append(Evaluation(summary, played.video, running.state))

    def ready(self) -> list[Evaluation]:
        """Finished evaluations not handed back yet, oldest first (never waits)."""
        self._collect(block=False)
        done, self._done = self._done, []
        return done

    def drain(self) -> list[Evaluation]:
        """Wait for the running evaluation; every finished one not handed back yet."""
        self._collect(block=True)
        done, self._done = self._done, []
        return done

    def _kill_actors(self) -> None:
        import ray

        for actor in self._actors:
            with contextlib.suppress(Exception):  # it may be gone already
                ray.kill(actor, no_restart=True)
        self._actors = []

    def stop(self) -> None:
        self._running = None
        if self._actors:
            self._kill_actors()
