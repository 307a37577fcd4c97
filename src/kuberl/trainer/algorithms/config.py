"""AlgorithmConfig: a fluent builder grouped like the manifest's sections.

    PPOConfig().environment("CartPole-v1").rollouts(workers=2, envs_per_worker=8)
        .training(lr=3e-4).resources(learner_gpus=0).debugging(seed=1).build()

The builder keeps a manifest document: `.build()` validates it with exactly
the code `kuberl train` uses on YAML (same field paths, same messages), so
Python keyword names are the manifest's names in snake_case.
"""

from __future__ import annotations

import copy
import importlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from pydantic.alias_generators import to_camel

from kuberl.api.algorithms import REGISTRY
from kuberl.api.field_errors import FieldError, ManifestError
from kuberl.api.hyperparams import CommonParams
from kuberl.api.types import API_VERSION, KIND, RLExperiment
from kuberl.api.validation import hyperparams_for, load_manifest, validate_document
from kuberl.trainer.run.callbacks import (
    Callbacks,
    EpisodeHook,
    FunctionCallbacks,
    ResultHook,
    build_callbacks,
)

if TYPE_CHECKING:
    from kuberl.trainer.algorithms.base import Algorithm

def _default_name(algorithm: str, env_id: str | None) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", f"{algorithm}-{env_id or 'env'}".lower()).strip("-")
    return name[:63] or "kuberl"


class AlgorithmConfig:
    """Settings of one algorithm run; subclasses fix `algorithm` and the Algorithm class they build."""

    algorithm: ClassVar[str] = ""

    def __init__(self) -> None:
        if not self.algorithm:
            raise TypeError("use an algorithm's config (PPOConfig, DQNConfig, ...) or algorithm_config_for()")
        self.document: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {},
            "spec": {"algorithm": self.algorithm, "env": {}, "config": {}},
        }
        self.callbacks_hooks: Callbacks | None = None  # None: spec.callbacks, if set, or none
        self._experiment: RLExperiment | None = None
        self._params: CommonParams | None = None

    # -- builder methods, one per manifest section -----------------------------------------------
    def _set(self, section: str, **values: Any) -> None:
        """Set fields of the manifest's `spec.SECTION`, named in snake_case (None: left as it is)."""
        self._experiment = None
        self.document["spec"].setdefault(section, {}).update(
            {to_camel(name): value for name, value in values.items() if value is not None})

    def environment(self, env: str | None = None, *, env_config: dict[str, Any] | None = None,
                    preprocessing: str | None = None, wrappers: list[dict[str, Any]] | None = None) -> Self:
        self._set("env", id=env, config=None if env_config is None else dict(env_config),
                  preprocessing=preprocessing, wrappers=None if wrappers is None else [dict(w) for w in wrappers])
        return self

    def rollouts(self, *, workers: int | None = None, envs_per_worker: int | None = None,
                 fragment_length: int | None = None, env_threads: int | None = None,
                 env_groups: int | None = None) -> Self:
        self._set("rollouts", workers=workers, envs_per_worker=envs_per_worker, fragment_length=fragment_length,
                  env_threads=env_threads, env_groups=env_groups)
        return self

    def multi_agent(self, *, policies: list[dict[str, Any]] | None = None, policies_to_train: list[str] | None = None,
                    agent_id_feature: bool | None = None) -> Self:
        """spec.multiAgent for a PettingZoo env: policies as [{"name", "agents", "config", "model"}] (manifest
        names), the ones that learn, the one-hot agent id (docs/multi-agent.md)."""
        self._set("multiAgent", policies=None if policies is None else [dict(policy) for policy in policies],
                  policies_to_train=policies_to_train, agent_id_feature=agent_id_feature)
        return self

    def replay(self, *, shards: int | None = None, capacity: int | None = None, prioritized: bool | None = None) -> Self:
        self._set("replay", shards=shards, capacity=capacity, prioritized=prioritized)
        return self

    def training(self, **params: Any) -> Self:
        """Hyperparameters by name (see kuberl.api.hyperparams): lr=3e-4, gamma=0.99, ..."""
        self._set("config", **params)
        return self

    def resources(self, *, learner_gpus: int | None = None, learner_bf16: bool | Literal["auto"] | None = None,
                  learner_threads: int | None = None) -> Self:
        """spec.learner: its GPUs, bfloat16 autocast (auto, True, False), torch's threads in its process."""
        self._set("learner", gpus=learner_gpus, bf16=learner_bf16, threads=learner_threads)
        return self

    def debugging(self, *, seed: int | None = None) -> Self:
        self._set("config", seed=seed)
        return self

    def stopping(self, *, timesteps: int | None = None, episode_return_mean: float | None = None,
                 time_seconds: int | None = None, iterations: int | None = None,
                 evaluation_return_mean: float | None = None) -> Self:
        self._set("stop", timesteps=timesteps, episode_return_mean=episode_return_mean, time_seconds=time_seconds,
                  iterations=iterations, evaluation_return_mean=evaluation_return_mean)
        return self

    def checkpointing(self, *, every_iterations: int | None = None, keep: int | None = None,
                      keep_best: bool | None = None) -> Self:
        self._set("checkpoint", every_iterations=every_iterations, keep=keep, keep_best=keep_best)
        return self

    def traces(self, *, enabled: bool | None = None, steps: bool | None = None) -> Self:
        self._set("traces", enabled=enabled, steps=steps)
        return self

    def callbacks(self, callbacks_class: type[Callbacks] | None = None, *, on_episode_end: EpisodeHook | None = None,
                  on_train_result: ResultHook | None = None) -> Self:
        """A Callbacks subclass (built with no arguments), or plain functions for two of its hooks."""
        if callbacks_class is not None:
            self.callbacks_hooks = callbacks_class()
            return self
        previous = self.callbacks_hooks if isinstance(self.callbacks_hooks, FunctionCallbacks) else FunctionCallbacks()
        self.callbacks_hooks = FunctionCallbacks(
            on_episode_end=on_episode_end or previous.episode_hook,
            on_train_result=on_train_result or previous.result_hook,
        )
        return self

    def evaluation(self, *, interval: int | None = None, episodes: int | None = None, workers: int | None = None,
                   explore: bool | None = None, env_config: dict[str, Any] | None = None,
                   video_every_evaluations: int | None = None) -> Self:
        """Evaluation during training as `kuberl train` and the operator run it (`to_document()` is the
        manifest); `algo.train()` by itself does not evaluate: call `algo.evaluate()`."""
        self._set("evaluation", interval=interval, episodes=episodes, workers=workers, explore=explore,
                  env_config=env_config,
                  video=None if video_every_evaluations is None else {"everyEvaluations": video_every_evaluations})
        return self

    def named(self, name: str, namespace: str | None = None) -> Self:
        self.document["metadata"] = {"name": name, **({"namespace": namespace} if namespace else {})}
        self._experiment = None
        return self

    # -- validation and building -----------------------------------------------------------------
    def to_document(self) -> dict[str, Any]:
        doc = copy.deepcopy(self.document)
        if not doc["metadata"].get("name"):
            doc["metadata"]["name"] = _default_name(self.algorithm, doc["spec"]["env"].get("id"))
        return doc

    def validate(self) -> RLExperiment:
        """The validated experiment; raises ManifestError naming every bad field."""
        if self._experiment is not None:
            return self._experiment
        from kuberl.trainer.run.checks import callbacks_errors, env_errors

        doc = self.to_document()
        try:
            experiment = validate_document(doc)
        except ManifestError as exc:
            # A Python run may go without stop criteria: the caller decides when to stop calling train().
            errors = [e for e in exc.errors if e.path != "spec.stop"]
            if errors:
                raise ManifestError(errors) from None
            doc["spec"]["stop"] = {"iterations": 2**31 - 1}
            experiment = validate_document(doc)
            experiment.spec.stop.iterations = None
        errors = env_errors(experiment) + callbacks_errors(experiment)
        if errors:
            raise ManifestError(errors)
        self._experiment = experiment
        self._params = hyperparams_for(experiment)
        return experiment

    @property
    def experiment(self) -> RLExperiment:
        return self.validate()

    @property
    def params(self) -> CommonParams:
        self.validate()
        assert self._params is not None
        return self._params

    def algorithm_class(self) -> type[Algorithm]:
        raise NotImplementedError

    def build(self) -> Algorithm:
        self.validate()
        from kuberl.trainer.multiagent.envs import is_multi_agent

        algorithm_class: type[Algorithm] = self.algorithm_class()
        if is_multi_agent(self.experiment.spec.env.id):  # a PettingZoo env: one learner per policy
            from kuberl.trainer.multiagent.algorithm import multi_agent_algorithm_class

            algorithm_class = multi_agent_algorithm_class(self.algorithm)
        return algorithm_class(self.experiment, self.params, self.build_callbacks())

    def build_callbacks(self) -> Callbacks:
        """The hooks set from Python, else those spec.callbacks names, else none."""
        if self.callbacks_hooks is not None:
            return self.callbacks_hooks
        path = self.experiment.spec.callbacks
        return build_callbacks(path) if path else Callbacks()

    def copy(self) -> Self:
        clone = copy.copy(self)
        clone.document = copy.deepcopy(self.document)
        return clone

    # -- from YAML -------------------------------------------------------------------------------
    @classmethod
    def from_experiment(cls, experiment: RLExperiment) -> AlgorithmConfig:
        """The config of a validated RLExperiment (of this class's algorithm, or any from the base class)."""
        algorithm = experiment.spec.algorithm
        config_class = config_class_for(algorithm) if not cls.algorithm else cls
        if config_class.algorithm != algorithm:
            raise ManifestError([FieldError("spec.algorithm", f"is {algorithm!r}, not {config_class.algorithm!r}")])
        config = config_class()
        config.document = experiment.to_manifest(exclude_unset=True)  # what it leaves unset stays unset
        config.document.pop("status", None)
        return config

    @classmethod
    def from_manifest(cls, path: str | Path, overrides: list[str] | None = None) -> AlgorithmConfig:
        """The config of a manifest file, with its task kind's defaults where it leaves values unset, as
        `kuberl train` trains it (kuberl.api.defaults; the builder methods apply no such set)."""
        from kuberl.trainer.run.task_defaults import resolve_task_defaults

        text = Path(path).read_text()
        experiment, _ = resolve_task_defaults(load_manifest(text, overrides=overrides, source=str(path)))
        return cls.from_experiment(experiment)


def config_class_for(algorithm: str) -> type[AlgorithmConfig]:
    """The AlgorithmConfig subclass the registry names for `algorithm`, imported on first use."""
    if algorithm not in REGISTRY:
        raise ManifestError([FieldError("spec.algorithm", f"must be one of {sorted(REGISTRY)}")])
    module_name, _, class_name = REGISTRY[algorithm].config_class.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def algorithm_config_for(experiment: RLExperiment) -> AlgorithmConfig:
    """The AlgorithmConfig the driver builds for a validated RLExperiment."""
    return AlgorithmConfig.from_experiment(experiment)
