"""User hooks into training: subclass `Callbacks` and override the hooks you need.

From a manifest, `spec.callbacks: package.module:Class` names the subclass; the trainer imports it
(as it imports a user's env class) and builds it with no arguments. From Python,
`.callbacks(MyCallbacks)` takes the class, and `.callbacks(on_episode_end=fn, on_train_result=fn)`
plain functions. Every hook gets keyword arguments only, so a hook may list just those it reads
and end with `**kwargs`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kuberl.trainer.run.observer import RunObserver
from kuberl.trainer.user_code import UserClassNotFound, import_user_class

if TYPE_CHECKING:
    from kuberl.trainer.iteration_result import EvaluationResult
    from kuberl.trainer.storage.base import CheckpointInfo

EpisodeHook = Callable[..., None]  # fn(algorithm=..., episode=record)
ResultHook = Callable[..., None]  # fn(algorithm=..., result=result)


class Callbacks:
    """The hooks the trainer calls; each default does nothing."""

    def on_episode_end(self, *, algorithm: Any, episode: dict[str, Any]) -> None:
        """A training episode finished. `episode` is a copy of its trace record (`EpisodeRecord`): experiment,
        worker, episode (the count so far), env, return, length, agents (a multi-agent episode's: each
        agent's policy, return and length), policyVersion, startTime, endTime, steps (with traces.steps)."""

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        """A training iteration finished; `result` is the dict `train()` returns (iteration, timesteps,
        episodes, episodeReturnMean, envStepsPerSecond, timeSeconds, learner stats, ...). Changes made
        here reach results.jsonl."""

    def on_evaluation_result(self, *, algorithm: Any, evaluation: dict[str, Any]) -> None:
        """An evaluation finished. `evaluation`: iteration and timesteps (of the policy it evaluated),
        episodes, returnMean, returnStd, lengthMean, returns, and video (its URI) when one was recorded."""

    def on_checkpoint_written(self, *, algorithm: Any, checkpoint: dict[str, Any]) -> None:
        """A checkpoint is complete in storage: `checkpoint` holds uri, iteration and timesteps. Called
        from the checkpoint writer's thread, while training goes on."""


class FunctionCallbacks(Callbacks):
    """Plain functions as hooks, for `.callbacks(on_episode_end=fn, on_train_result=fn)`."""

    def __init__(self, on_episode_end: EpisodeHook | None = None, on_train_result: ResultHook | None = None):
        self.episode_hook = on_episode_end
        self.result_hook = on_train_result

    def on_episode_end(self, *, algorithm: Any, episode: dict[str, Any]) -> None:
        if self.episode_hook is not None:
            self.episode_hook(algorithm=algorithm, episode=episode)

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        if self.result_hook is not None:
            self.result_hook(algorithm=algorithm, result=result)


class CallbacksObserver(RunObserver):
    """Calls the algorithm's callbacks for what the run sees (`on_episode_end` and `on_train_result`
    are the algorithm's own)."""

    def __init__(self, algorithm: Any) -> None:
        self.algorithm = algorithm

    def on_evaluation(self, evaluation: EvaluationResult) -> None:
        self.algorithm.callbacks.on_evaluation_result(algorithm=self.algorithm, evaluation=evaluation.to_json())

    def on_checkpoint_written(self, info: CheckpointInfo, seconds: float) -> None:
        checkpoint = {"uri": info.uri, "iteration": info.iteration, "timesteps": info.timesteps}
        self.algorithm.callbacks.on_checkpoint_written(algorithm=self.algorithm, checkpoint=checkpoint)


class CallbacksNotFound(ValueError):
    """`spec.callbacks` names no importable Callbacks subclass."""


def import_callbacks_class(path: str) -> type[Callbacks]:
    """Import "package.module:Class"; raises CallbacksNotFound with the reason."""
    try:
        return import_user_class(path, Callbacks, "kuberl.trainer.run.callbacks.Callbacks")
    except UserClassNotFound as exc:
        raise CallbacksNotFound(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a user's module may raise anything on import
        raise CallbacksNotFound(f"{path!r}: importing it failed: {type(exc).__name__}: {exc}") from None
    except SystemExit as exc:
        raise CallbacksNotFound(f"{path!r}: importing it called sys.exit({exc.code!r})") from None


def build_callbacks(path: str) -> Callbacks:
    """An instance of the class `spec.callbacks` names; raises CallbacksNotFound."""
    cls = import_callbacks_class(path)
    try:
        return cls()
    except Exception as exc:  # noqa: BLE001 - user code
        raise CallbacksNotFound(f"{path!r}: {cls.__name__}() failed: {type(exc).__name__}: {exc}") from None
