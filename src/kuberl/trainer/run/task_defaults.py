"""The task-kind defaults at the start of a run (`kuberl.api.defaults`), and the ones that depend on the machine.

`resolve_task_defaults` builds the env once to learn its spaces, picks the kind's set, writes the values the
manifest left unset into the experiment (so the run's experiment.yaml, checkpoints and tracking hold what was
trained), and adapts two values to the machine where the manifest did not set them:

- `rollouts.envsPerWorker` for images sampled in the learner's process (`rollouts.workers: 0`): ALE's vector env
  steps them on one thread per core, so fewer envs than cores leaves cores idle. The fragment keeps its length
  (PPO's 128 steps are its GAE horizon, as in CleanRL and RL Zoo), so PPO's train batch grows with the envs and
  its minibatches keep their size (more of them). Vector envs step on one thread, so cores do not change theirs.
- Ape-X's `replayRatio`, the learner updates per env step that sampling waits for: the published ratio where the
  learner can sustain it while the rollout workers sample at full speed, else what it can (down to a floor):
  measured at start from a few updates of the real network on the CPU on a batch of the env's shape and a few
  hundred steps of one env. A learner on a GPU (`learner.gpus: 1`) keeps the published ratio.

A multi-agent (PettingZoo) env's kind comes from each policy's agents' spaces: where every policy's is the same,
that kind's set applies to the run (`spec.config`, under each policy's own `config`), less what multi-agent runs
refuse (`config.observationFilter`); where they differ, no set applies and the line says so. The machine's
choices are for single-agent envs (ALE's vector env, Ape-X).

`spec.learner.bf16` as the learner will resolve it on the device this process gives it (auto: bfloat16 for a
conv encoder on a GPU that computes it natively, float32 on every CPU) is recorded under `defaults.machine.bf16`,
and the line says it for image tasks and wherever it is true.

The chosen values go into the first results line under `defaults`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from kuberl.api.defaults import (
    TaskKind,
    defaults_line,
    resolved_defaults,
    set_note,
    task_kind,
    user_set_paths,
    with_values,
)
from kuberl.api.hyperparams import ApexDQNParams, PPOParams
from kuberl.api.types import LearnerSpec, RLExperiment
from kuberl.trainer.machine import usable_cores

if TYPE_CHECKING:
    from kuberl.trainer.learning.device import Bf16Record

MAX_IMAGE_ENVS = 64
# Ape-X replayed samples per env step: (what to aim for, the least to fall to) by task kind. Vector: 8 per step
# is what learns CartPole here, and less was not measured, so it does not fall; images: the paper's learner
# trained on about 0.8 per step, and a conv learner on CPUs manages far less than 8 (Pong: 70 env steps/s).
APEX_SAMPLES_PER_STEP: dict[TaskKind, tuple[float, float]] = {
    "discrete-vector": (8.0, 8.0),
    "image": (1.0, 0.25),
}
MEASURE_BATCH = 64  # rows per timed update; CPU time per update grows about linearly with them


class MachineChoices(TypedDict, total=False):
    """`defaults.machine`: what the machine chose for a run, and what it was measured at."""

    cores: int
    trainBatch: int  # noqa: N815 - the results' names
    minibatches: int
    replayRatio: str  # noqa: N815 - why Ape-X's replay ratio was not measured (yet)
    learnerSamplesPerSecond: float  # noqa: N815
    samplerStepsPerSecond: float  # noqa: N815
    replayedSamplesPerStep: float  # noqa: N815
    chosen: list[str]  # the paths the machine set
    bf16: Bf16Record


class _Chosen(TypedDict):
    kind: TaskKind | None
    name: str
    values: dict[str, Any]  # manifest paths under spec -> the values set
    machine: MachineChoices


class DefaultsRecord(_Chosen, total=False):
    """The `defaults` entry of a run's first results line."""

    note: str
    policies: dict[str, TaskKind | None]


@dataclass
class TaskDefaults:
    """What the task-kind defaults chose for one run."""

    kind: TaskKind | None  # None: a multi-agent run whose policies' kinds differ, so no set applies
    name: str
    values: dict[str, Any]  # manifest paths under spec -> values, those the manifest did not set
    machine: MachineChoices = field(default_factory=MachineChoices)
    policies: dict[str, TaskKind | None] = field(default_factory=dict)  # multi-agent: each policy's kind
    note: str = ""  # why the kind's set is empty: its values were never measured (kuberl.api.defaults)

    def line(self) -> str:
        if self.kind is None:
            kinds = ", ".join(f"{name}: {kind or 'none'}" for name, kind in self.policies.items())
            return f"no task-kind defaults: the policies' tasks differ in kind ({kinds}); set their values in the manifest"
        note = self.machine.get("replayRatio")  # why Ape-X's replay ratio was not measured (yet)
        line = defaults_line(self.name, self.values, self.note) + (f"; replayRatio: {note}" if note else "")
        bf16 = self.machine.get("bf16")
        if bf16 and (self.kind == "image" or bf16["setting"] is True):
            line += f"; learner.bf16: {bf16['reason']}"
        return line

    def record(self) -> DefaultsRecord:
        """The `defaults` entry of the first results line."""
        record: DefaultsRecord = {"kind": self.kind, "name": self.name, "values": dict(self.values),
                                  "machine": self.machine.copy()}
        if self.note:
            record["note"] = self.note
        if self.policies:
            record["policies"] = dict(self.policies)
        return record


# Values of a task-kind set that multi-agent runs refuse (kuberl.trainer.multiagent.checks).
MULTI_AGENT_REFUSED = frozenset({"config.observationFilter"})


def _kind_of(observation: Any, action: Any) -> TaskKind | None:
    import gymnasium as gym

    from kuberl.trainer.models.image_shapes import is_image_space

    if not isinstance(observation, gym.spaces.Box) or not isinstance(action, gym.spaces.Discrete | gym.spaces.Box):
        return None
    return task_kind(type(action).__name__, is_image_space(observation))


def policy_task_kinds(experiment: RLExperiment) -> dict[str, TaskKind | None] | None:
    """Each policy's kind (None: its agents' spaces have none, or differ in kind) for a PettingZoo env; None for a
    single-agent env. Raises what building the env raises."""
    from kuberl.api.multiagent import map_agents, policies_of
    from kuberl.trainer.multiagent.envs import is_multi_agent, spec_agent_spaces

    env = experiment.spec.env
    if not is_multi_agent(env.id):
        return None
    spaces = spec_agent_spaces(env)
    found: dict[str, set[TaskKind | None]] = {}
    for agent, policy in map_agents(spaces.agents, policies_of(experiment.spec)).items():
        if policy is not None:
            found.setdefault(policy, set()).add(
                _kind_of(spaces.observation_spaces[agent], spaces.action_spaces[agent]))
    return {policy: next(iter(kinds)) if len(kinds) == 1 else None for policy, kinds in found.items()}


def detect_task_kind(experiment: RLExperiment) -> TaskKind | None:
    """The task's kind from the env's spaces; None where the env cannot be built or its spaces are neither
    (the env checks report what is wrong). A multi-agent env's: its policies' kind where they all have the same."""
    from kuberl.trainer.sampling.envs import EnvSettings, env_spaces

    try:
        kinds = policy_task_kinds(experiment)
        if kinds is not None:
            return next(iter(set(kinds.values()))) if len(set(kinds.values())) == 1 else None
        spaces = env_spaces(EnvSettings.from_spec(experiment.spec.env))
    except Exception:  # noqa: BLE001 - the env checks name the problem; no kind, no defaults
        return None
    return _kind_of(spaces.observation_space, spaces.action_space)


def image_envs_for_cores(envs: int, cores: int) -> int:
    """Envs for images stepped on `cores` threads: at least one a core (at most MAX_IMAGE_ENVS), never fewer than
    `envs`. The fragment is left alone: shortening it to keep the batch would cut PPO's GAE horizon (64 cores
    would leave 16 of CleanRL's 128 steps)."""
    return max(envs, min(cores, MAX_IMAGE_ENVS))


def bf16_record(learner: LearnerSpec, *, conv: bool) -> Bf16Record:
    """`spec.learner.bf16` as the learner resolves it on the device this process gives it (a GPU it cannot see
    is left to the learner)."""
    import torch

    from kuberl.trainer.learning.device import learner_bf16_choice

    if learner.gpus and not torch.cuda.is_available():
        return {"setting": learner.bf16, "device": "cuda", "enabled": None,
                "reason": "chosen by the learner on its GPU, which this process does not see"}
    device = torch.device("cuda" if learner.gpus else "cpu")
    return learner_bf16_choice(learner.bf16, device, conv=conv).record()


def adaptive_replay_ratio(kind: TaskKind, batch: int, learner_samples_per_s: float,
                          sampler_steps_per_s: float) -> float:
    """Ape-X learner updates per env step: the kind's samples per step where the learner keeps up with the
    workers' full speed, else what it can, down to the kind's floor; divided by the batch."""
    target, floor = APEX_SAMPLES_PER_STEP[kind]
    affordable = learner_samples_per_s / max(sampler_steps_per_s, 1e-9)
    return min(target, max(floor, affordable)) / batch


def _measure_learner(experiment: RLExperiment, seconds: float = 1.0) -> float:
    """Samples per second an Ape-X learner on this machine's CPU trains on: updates of this network (its
    online and target passes, the backward pass, Adam) timed on part of a batch of the env's shape."""
    import numpy as np
    import torch

    from kuberl.api.validation import hyperparams_for
    from kuberl.trainer.models.q_network import build_q_network
    from kuberl.trainer.sampling.envs import EnvSettings, env_spaces

    spaces = env_spaces(EnvSettings.from_spec(experiment.spec.env))
    params = hyperparams_for(experiment)
    assert isinstance(params, ApexDQNParams)  # measured for apex-dqn only
    network = build_q_network(spaces.observation_space, spaces.action_space, params)  # a GPU's is not measured
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-9)
    batch = min(params.train_batch_size, MEASURE_BATCH)
    shape = spaces.observation_space.shape or ()
    sample = spaces.observation_space.sample()
    obs = torch.as_tensor(np.repeat(np.asarray(sample)[None], batch, axis=0)).reshape(batch, *shape).float()

    def update() -> None:
        with torch.no_grad():
            network(obs)  # the target network's pass
        loss = network(obs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    update()
    started, updates = time.perf_counter(), 0
    while updates < 2 or (time.perf_counter() - started < seconds and updates < 200):
        update()
        updates += 1
    return updates * batch / (time.perf_counter() - started)


def _measure_env(experiment: RLExperiment, seconds: float = 0.5) -> float:
    """Env steps per second of one env of this spec, random actions, on this core."""
    from kuberl.trainer.sampling.envs import EnvSettings, make_env

    env = make_env(EnvSettings.from_spec(experiment.spec.env))
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        started, steps = time.perf_counter(), 0
        while steps < 50 or (time.perf_counter() - started < seconds and steps < 20_000):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            steps += 1
            if terminated or truncated:
                env.reset()
        return steps / (time.perf_counter() - started)
    finally:
        env.close()


def machine_values(experiment: RLExperiment, kind: TaskKind, taken: set[str], *, cores: int,
                   measure: bool) -> tuple[dict[str, Any], MachineChoices]:
    """(values the machine chose, the record of why) for a resolved experiment; `taken`: the manifest's paths."""
    spec = experiment.spec
    values: dict[str, Any] = {}
    record: MachineChoices = {"cores": cores}
    if kind == "image" and spec.rollouts.workers == 0 and "rollouts.envsPerWorker" not in taken:
        envs = image_envs_for_cores(spec.rollouts.envs_per_worker, cores)
        if envs != spec.rollouts.envs_per_worker:
            values["rollouts.envsPerWorker"] = envs
        if spec.algorithm == "ppo":  # the batch grows with the envs; the minibatch keeps its size
            from kuberl.api.validation import hyperparams_for

            params = hyperparams_for(experiment)
            assert isinstance(params, PPOParams)
            batch = envs * spec.rollouts.fragment_length
            record["trainBatch"] = batch
            record["minibatches"] = max(1, round(batch / params.minibatch_size))
    if spec.algorithm == "apex-dqn" and kind in APEX_SAMPLES_PER_STEP and "config.replayRatio" not in taken:
        if spec.learner.gpus:  # the paper's learner was a GPU's: it keeps up; and the driver leaves CUDA alone
            record["replayRatio"] = "the published one, for a learner on a GPU"
        elif measure:
            from kuberl.api.validation import hyperparams_for

            apex = hyperparams_for(experiment)
            assert isinstance(apex, ApexDQNParams)
            batch = apex.train_batch_size
            learner = _measure_learner(experiment)
            # one env a worker at a time, a worker a CPU: this machine's cores bound them unless worker pods run them
            parallel = spec.rollouts.workers if spec.workers.replicas else min(spec.rollouts.workers, cores)
            sampler = _measure_env(experiment) * max(1, parallel)
            values["config.replayRatio"] = adaptive_replay_ratio(kind, batch, learner, sampler)
            record["learnerSamplesPerSecond"] = round(learner, 1)
            record["samplerStepsPerSecond"] = round(sampler, 1)
            record["replayedSamplesPerStep"] = round(values["config.replayRatio"] * batch, 3)
        else:
            record["replayRatio"] = "measured when training starts"
    return values, record


def resolve_task_defaults(experiment: RLExperiment, *, measure: bool = True,
                          cores: int | None = None) -> tuple[RLExperiment, TaskDefaults | None]:
    """The experiment with its task kind's defaults and the machine's choices written in, and what they were;
    (the experiment, None) where the kind cannot be told (the env checks report why)."""
    try:
        policies = policy_task_kinds(experiment)
    except Exception:  # noqa: BLE001 - the env checks name the problem
        return experiment, None
    if policies is not None:
        return _multi_agent_defaults(experiment, policies)
    kind = detect_task_kind(experiment)
    if kind is None:
        return experiment, None
    taken = user_set_paths(experiment)
    name, values = resolved_defaults(experiment, kind)
    resolved = with_values(experiment, values) if values else experiment
    chosen, record = machine_values(resolved, kind, taken, cores=cores or usable_cores(), measure=measure)
    if chosen:
        resolved = with_values(resolved, chosen)
        values = {**values, **chosen}
    record["chosen"] = sorted(chosen)
    record["bf16"] = bf16_record(resolved.spec.learner, conv=kind == "image")
    return resolved, TaskDefaults(kind, name, values, record, note=set_note(experiment.spec.algorithm, kind))


def _multi_agent_defaults(experiment: RLExperiment,
                          policies: dict[str, TaskKind | None]) -> tuple[RLExperiment, TaskDefaults | None]:
    """One kind for every policy: its set, less what multi-agent runs refuse; kinds that differ: none, said so."""
    kinds = set(policies.values())
    if len(kinds) != 1:
        return experiment, TaskDefaults(None, "no task-kind defaults", {}, policies=policies)
    kind = next(iter(kinds))
    if kind is None:
        return experiment, None
    name, values = resolved_defaults(experiment, kind)
    values = {path: value for path, value in values.items() if path not in MULTI_AGENT_REFUSED}
    resolved = with_values(experiment, values) if values else experiment
    return resolved, TaskDefaults(kind, name, values, {"bf16": bf16_record(resolved.spec.learner, conv=kind == "image")},
                                  policies=policies, note=set_note(experiment.spec.algorithm, kind))
