"""The Algorithm base class: the loop every algorithm shares around its own update step.

A subclass (PPO, DQN, Ape-X DQN) implements `setup()`, `training_step()`,
`compute_actions()`, `learner_state()` and `load_learner_state()`; this class
keeps the counters, the 100-episode return window, the episode sink and the
callbacks, the master observation filter, seeds, checkpoints and evaluation.
"""

from __future__ import annotations

import json
import random
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from kuberl.api.yaml_text import dump_yaml
from kuberl.trainer.algorithms.checkpoint_fit import model_mismatch_errors
from kuberl.trainer.evaluation.episodes import EnvFactory, PlayedEpisodes, play_episodes
from kuberl.trainer.iteration_result import IterationResult, StepResult
from kuberl.trainer.learning.device import configure_cpu_threads, learner_device
from kuberl.trainer.learning.schedules import (
    OptimizerRates,
    anneal_horizon,
    anneal_lr,
    optimizer_rates,
    set_optimizer_rates,
)
from kuberl.trainer.machine import usable_cores
from kuberl.trainer.models.weights import torch_bytes, torch_load_bytes
from kuberl.trainer.sampling.envs import EnvSettings, EnvSpaces, env_spaces
from kuberl.trainer.sampling.episode_records import EpisodeRecord
from kuberl.trainer.sampling.filters import make_filter, stats_from_bytes, stats_to_bytes
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.sampling.rollout_worker import SampleBatch, WorkerConfig, WorkerPolicies
from kuberl.trainer.sampling.sampler import Sampler
from kuberl.trainer.sampling.seeds import evaluation_seeds
from kuberl.trainer.sampling.worker_set import WorkerSet
from kuberl.trainer.storage.checkpoint_listing import COUNTERS_FILE
from kuberl.trainer.storage.run import SPEC

if TYPE_CHECKING:
    from kuberl.api.hyperparams import CommonParams
    from kuberl.api.types import RLExperiment
    from kuberl.trainer.evaluation.actor import EvaluationActor
    from kuberl.trainer.run.callbacks import Callbacks

RETURN_WINDOW = 100
RNG_FILE = "rng.pt"
FILTER_FILE = "filter.npz"


def env_threads(configured: int | None, workers: int, envs_per_worker: int) -> int:
    """`rollouts.envThreads`, or its default: one per rollout worker actor, the machine's cores in-process."""
    if configured is not None:
        return configured
    return 1 if workers > 0 else max(1, min(envs_per_worker, usable_cores()))


def seed_everything(seed: int | None) -> np.random.Generator:
    """Seed Python, numpy and torch; the algorithm's own numpy generator comes back."""
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
    return np.random.default_rng(seed)


def evaluation_statistics(episodes: int, returns: list[float], lengths: list[int]) -> dict[str, Any]:
    """What `evaluate` reports of the episodes it played."""
    return {
        "episodes": episodes,
        "episodeReturnMean": float(np.mean(returns)) if returns else None,
        "episodeReturnStd": float(np.std(returns)) if returns else None,
        "episodeReturnMin": float(np.min(returns)) if returns else None,
        "episodeReturnMax": float(np.max(returns)) if returns else None,
        "episodeLengthMean": float(np.mean(lengths)) if lengths else None,
        "returns": returns,
    }


class Algorithm:
    """One experiment's training state; `train()` runs one iteration."""

    def __init__(self, experiment: RLExperiment, params: CommonParams, callbacks: Callbacks):
        self.experiment = experiment
        self.spec = experiment.spec
        self.params = params
        self.callbacks = callbacks
        self.episode_sink: Callable[[EpisodeRecord], None] | None = None
        self.iteration = 0
        self.timesteps = 0
        self.episodes = 0
        self.time_total = 0.0
        self.policy_version = 0
        self.return_window: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.np_random = seed_everything(self.params.seed)
        self.device = learner_device(self.spec.learner.gpus)
        configure_cpu_threads(self.spec.learner.threads)
        self.env_settings = EnvSettings.from_spec(self.spec.env)
        spaces = self.spaces()
        self.observation_space = spaces.observation_space
        self.action_space = spaces.action_space
        self.frame_stack = spaces.frame_stack
        self.obs_filter = make_filter(self.params.observation_filter, tuple(self.observation_space.shape or ()))
        self.sampler: Sampler | None = None  # set by setup(): the rollout workers, however they run
        # Only where the manifest asked for it: APPO anneals by default wherever there is a step budget.
        if ("anneal_lr" in self.params.model_fields_set and getattr(self.params, "anneal_lr", False)
                and self.anneal_horizon(self.params) is None):
            warnings.warn("spec.config.annealLr needs spec.stop.timesteps (or config.annealTimesteps); the learning "
                          "rate stays constant", RuntimeWarning, stacklevel=2)
        self.setup()

    # -- what a subclass implements --------------------------------------------------------------
    def spaces(self) -> EnvSpaces:
        """The spaces the learner's networks are built for (a multi-agent algorithm: those of its first policy)."""
        return env_spaces(self.env_settings)

    def setup(self) -> None:
        """Build models, optimizers and workers."""
        raise NotImplementedError

    def training_step(self) -> StepResult:
        """Sample and learn once: the env steps sampled and the algorithm's sections of the result."""
        raise NotImplementedError

    def anneal_horizon(self, params: Any) -> int | None:
        """The env steps `params`' annealLr runs over: its annealTimesteps (a PBT sweep's budget), else
        stop.timesteps."""
        return anneal_horizon(getattr(params, "anneal_timesteps", None), self.spec.stop.timesteps)

    def anneal(self, learner: Any, env_steps: int = 0) -> None:
        """`annealLr` of the learner's params (a multi-agent policy's own): set its optimizer's rate for the share
        of the anneal horizon left after `env_steps` more. Nothing without annealLr or a horizon."""
        params = learner.params
        horizon = self.anneal_horizon(params)
        if getattr(params, "anneal_lr", False) and horizon:
            anneal_lr(learner.optimizer, params.lr, self.timesteps + env_steps, horizon)

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        """Actions for a batch of filtered observations, from the learner's model."""
        raise NotImplementedError

    def learner_state(self) -> dict[str, bytes]:
        """Checkpoint files of the learner: model, optimizer, exploration schedule."""
        raise NotImplementedError

    def load_learner_state(self, files: dict[str, bytes]) -> None:
        raise NotImplementedError

    def worker_weights(self) -> Any:
        """What rollout workers' policies load (numpy arrays, cheap to ship)."""
        raise NotImplementedError

    def learning_rates(self) -> dict[str, OptimizerRates]:
        """Each learner's optimizer rates, by policy (a single-agent run's one learner under "default")."""
        learner = getattr(self, "learner", None)
        return {} if learner is None else {"default": optimizer_rates(learner)}

    def set_learning_rates(self, rates: dict[str, OptimizerRates]) -> None:
        """Set back what `learning_rates` gave: loading a checkpoint brings its run's rates with the optimizer's
        state (`spec.checkpoint.restoreFrom` keeps this run's)."""
        learner = getattr(self, "learner", None)
        if learner is not None and "default" in rates:
            set_optimizer_rates(learner, rates["default"])

    def policy_module(self) -> torch.nn.Module:
        """The greedy policy as a torch module of its own on the CPU (a copy: training goes on): a batch of
        filtered float32 observations, as `compute_actions` gets them, to actions (argmax for Discrete, the
        mean for Box). `kuberl export` and checkpoint.export add the observation filter and save it."""
        raise NotImplementedError(f"{self.spec.algorithm} cannot export its policy yet")

    # -- helpers for subclasses ------------------------------------------------------------------
    def worker_config(self, seed_offset: int = 0) -> WorkerConfig:
        spec = self.spec
        return WorkerConfig(
            env_id=spec.env.id,
            env_config=dict(spec.env.config),
            num_envs=spec.rollouts.envs_per_worker,
            fragment_length=spec.rollouts.fragment_length,
            observation_filter=self.params.observation_filter,
            experiment=self.experiment.name,
            seed=None if self.params.seed is None else self.params.seed + seed_offset,
            record_steps=spec.traces.enabled and spec.traces.steps,
            preprocessing=self.env_settings.preprocessing,
            wrappers=self.env_settings.wrappers,
            env_threads=env_threads(spec.rollouts.env_threads, spec.rollouts.workers, spec.rollouts.envs_per_worker),
            env_groups=spec.rollouts.env_groups,
        )

    def sampling_device(self) -> str:
        """Where in-process sampling runs its policy: on the learner's GPU when there is one (a conv net
        batched over the envs is the GPU's work, and the weights are already there), else on the CPU.
        Rollout worker actors always sample on their CPUs."""
        return self.device.type if self.spec.rollouts.workers == 0 else "cpu"

    def sync_weights(self) -> None:
        """Publish the learner's weights to every rollout worker."""
        self.policy_version += 1
        if self.sampler is not None:
            self.sampler.publish_weights(self.worker_weights(), self.policy_version)

    def sync_filters(self, batches: list[SampleBatch]) -> None:
        """Merge the workers' filter deltas into the master filter and send it back to them."""
        for batch in batches:
            self.obs_filter.apply_delta(batch.filter_delta)
        if self.sampler is not None:
            self.sampler.sync_filter(self.obs_filter.get_state())

    def record_episodes(self, records: list[EpisodeRecord]) -> None:
        """Count finished episodes, feed the return window, the sink and the callbacks (`on_episode_end` gets a
        copy of the record, so what it changes reaches nothing else)."""
        for record in records:
            self.episodes += 1
            record["episode"] = self.episodes
            self.return_window.append(record["return"])
            if self.episode_sink is not None:
                self.episode_sink(record)
            self.callbacks.on_episode_end(algorithm=self, episode=dict(record))

    def forget_episodes(self) -> None:
        """Empty the return windows (the episode counter goes on): a run started from another run's checkpoint
        reports its own episodes only, so a PBT member is scored on its own play of the round."""
        self.return_window.clear()

    def collect(self) -> list[SampleBatch]:
        """Sample every worker once, then sync filters and record the finished episodes."""
        assert isinstance(self.sampler, WorkerSet), "collect() samples a WorkerSet"
        batches = self.sampler.sample()
        self.sync_filters(batches)
        for batch in batches:
            self.record_episodes(batch.episodes)
        return batches

    # -- the public surface ----------------------------------------------------------------------
    @property
    def episode_return_mean(self) -> float | None:
        return float(np.mean(self.return_window)) if self.return_window else None

    def train(self) -> dict[str, Any]:
        """One iteration; its result as results.jsonl writes it (the Python API's view)."""
        return self.train_iteration().to_json()

    def train_iteration(self) -> IterationResult:
        """One iteration: sample and learn (`training_step`), count, and tell the callbacks."""
        started = time.perf_counter()
        step = self.training_step()
        elapsed = time.perf_counter() - started
        self.iteration += 1
        self.timesteps += step.env_steps
        self.time_total += elapsed
        if self.sampler is not None:
            step = replace(step, sampler={**step.sampler, "workerRestarts": self.sampler.restarts})
        result = IterationResult(
            iteration=self.iteration, timesteps=self.timesteps, episodes=self.episodes,
            episode_return_mean=self.episode_return_mean,
            env_steps_per_second=step.env_steps / elapsed if elapsed > 0 else 0.0, time_seconds=self.time_total,
            iteration_seconds=elapsed, policy_version=self.policy_version, step=step,
        )
        # A user's callback sees (and may add to) the result as results.jsonl will hold it.
        line = result.to_json()
        self.callbacks.on_train_result(algorithm=self, result=line)
        read = IterationResult.from_json(line)
        return replace(read, step=replace(read.step, env_steps=step.env_steps))

    def get_state(self) -> dict[str, bytes]:
        counters = {
            "algorithm": self.spec.algorithm,
            "iteration": self.iteration,
            "timesteps": self.timesteps,
            "episodes": self.episodes,
            "timeSeconds": self.time_total,
            "policyVersion": self.policy_version,
            "returnWindow": list(self.return_window),
        }
        rng = {
            "torch": torch.get_rng_state(),
            "numpy": json.dumps(self.np_random.bit_generator.state),
            "python": json.dumps(random.getstate()),
        }
        files = {
            COUNTERS_FILE: json.dumps(counters, indent=1).encode(),
            RNG_FILE: torch_bytes(rng),
            FILTER_FILE: stats_to_bytes(self.obs_filter.get_state()),
        }
        files.update(self.learner_state())
        return files

    def set_state(self, files: dict[str, bytes]) -> None:
        counters = json.loads(files[COUNTERS_FILE])
        if counters.get("algorithm", self.spec.algorithm) != self.spec.algorithm:
            raise ValueError(f"the checkpoint is of algorithm {counters['algorithm']!r}, not {self.spec.algorithm!r}")
        self.iteration = int(counters["iteration"])
        self.timesteps = int(counters["timesteps"])
        self.episodes = int(counters["episodes"])
        self.time_total = float(counters["timeSeconds"])
        self.policy_version = int(counters["policyVersion"])
        self.return_window = deque(counters["returnWindow"], maxlen=RETURN_WINDOW)
        if RNG_FILE in files:
            rng = torch_load_bytes(files[RNG_FILE])
            torch.set_rng_state(rng["torch"])
            self.np_random.bit_generator.state = json.loads(rng["numpy"])
            version, state, gauss = json.loads(rng["python"])
            random.setstate((version, tuple(state), gauss))
        self.obs_filter.set_state(stats_from_bytes(files.get(FILTER_FILE, b"")))
        self.load_learner_state(files)
        self.policy_version -= 1  # sync_weights counts the broadcast below
        self.sync_weights()
        if self.sampler is not None:
            self.sampler.sync_filter(self.obs_filter.get_state())

    def save(self, uri_or_path: str) -> str:
        """Write a checkpoint under a run root (file:// path, plain path or s3://); returns its URI. As `kuberl
        train` does, it keeps the experiment (experiment.yaml) in the checkpoint and at the root, and a run record,
        so that `kuberl evaluate`, `export`, `checkpoints` and `info` read the run."""
        from kuberl.trainer.run.run_record import read_records, write_record
        from kuberl.trainer.storage import open_store
        from kuberl.trainer.storage.checkpoints import write_checkpoint

        store = open_store(str(uri_or_path), endpoint=self.spec.storage.endpoint, region=self.spec.storage.region)
        spec_text = dump_yaml(self.experiment.to_manifest(), sort_keys=False).encode()
        info = write_checkpoint(store, self.iteration, {**self.get_state(), SPEC: spec_text},
                                timesteps=self.timesteps)
        store.put_bytes(SPEC, spec_text)
        if not read_records(store):
            write_record(store, self.experiment, attempt=0)
        return info.uri

    def restore(self, uri_or_path: str) -> None:
        """Load a checkpoint directory, or the latest complete checkpoint under a run root. Refused (ManifestError)
        where this algorithm's networks or observation filter are set otherwise than the checkpoint's experiment
        (`checkpoint_fit.MODEL_FIELDS`): its weights would not load, or would act otherwise."""
        from kuberl.api.field_errors import ManifestError
        from kuberl.trainer.storage.checkpoints import load_checkpoint

        files, info = load_checkpoint(str(uri_or_path), endpoint=self.spec.storage.endpoint,
                                      region=self.spec.storage.region)
        errors = model_mismatch_errors(files, self.params, info.uri)
        if errors:
            raise ManifestError(errors)
        self.set_state(files)

    def compute_single_action(self, obs: Any, explore: bool = False) -> Any:
        array = np.asarray(obs)
        if array.dtype != np.uint8:  # images stay uint8 until they are a tensor
            array = array.astype(np.float32)
        filtered = self.obs_filter(array[None], update=False)
        action = self.compute_actions(filtered, explore)[0]
        return action.item() if np.ndim(action) == 0 else action

    def evaluation_env(self, env_config: dict[str, Any] | None = None) -> EnvFactory:
        """The evaluation envs' factory: spec.env with `env_config` merged over its config."""
        return EnvFactory(replace(self.env_settings, config={**self.env_settings.config, **(env_config or {})}))

    def evaluation_settings(self) -> PolicySettings:
        """What the evaluation actors' policy is configured with before it plays (`policy.configure`):
        the exploration the rollout workers act with now, for `evaluation.explore: true` (DQN and Ape-X:
        their epsilon; a policy left unconfigured would keep its starting one)."""
        return PolicySettings()

    def evaluation_worker_class(self) -> type[EvaluationActor] | None:
        """The evaluation actor's class where it is not `kuberl.trainer.evaluation.actor.EvaluationWorker`."""
        return None

    def evaluation_policy(self) -> tuple[WorkerPolicies, Any]:
        """What evaluation actors run: the rollout workers' policy factory and the weights it loads."""
        if self.sampler is None:
            raise NotImplementedError(f"{type(self).__name__} has no rollout workers; override evaluation_policy()")
        return self.sampler.policy_factory, self.worker_weights()

    def play(self, seeds: list[int], *, explore: bool = False, env_config: dict[str, Any] | None = None,
             record_first: bool = False) -> PlayedEpisodes:
        """Play one episode per seed with the learner's policy (no learning), in this process."""
        return play_episodes(self.evaluation_env(env_config), lambda obs: self.compute_single_action(obs, explore),
                             seeds, record_first=record_first)

    def evaluation_seeds(self, episodes: int, seed: int | None = None) -> list[int]:
        """The env seeds of `episodes` evaluation episodes: from `seed` on, or apart from every training env's."""
        if seed is not None:
            return list(range(seed, seed + episodes))
        return evaluation_seeds(self.params.seed, episodes)

    def evaluate(self, episodes: int = 10, *, explore: bool = False, seed: int | None = None) -> dict[str, Any]:
        """Play whole episodes with the learner's policy (no learning); returns their statistics."""
        played = self.play(self.evaluation_seeds(episodes, seed), explore=explore)
        return evaluation_statistics(episodes, played.returns, played.lengths)

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def __enter__(self) -> Algorithm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
