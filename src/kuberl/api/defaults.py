"""Defaults chosen by the kind of task: one table of published and measured settings per algorithm.

A manifest that holds only `algorithm` and `env.id` trains with the set for its task kind, detected from the
env's spaces: `discrete-vector` (a vector Box observation, Discrete actions), `continuous-vector` (a vector Box
observation, Box actions) and `image` (uint8 image observations, such as `env.preprocessing: atari`). Each value
names its source (`SOURCES`): a published script's defaults (CleanRL), tuned hyperparameters (RL Zoo, RLlib's
tuned examples), a paper, or a measurement here (docs/benchmarks.md). Values are manifest paths under `spec`
("config.lr", "rollouts.fragmentLength", "replay.capacity"); anything the manifest sets wins, field by field.

The hyperparameter models' own defaults (`kuberl.api.hyperparams`) are the discrete-vector ones (they solve
CartPole-v1 and Acrobot-v1), so the Python builder (`PPOConfig()...`), which applies no task-kind set, trains as
before. Which algorithms can act in a kind comes from the registry's action spaces (`kuberl.api.algorithms`).

Pure and light: the operator and `kuberl validate --skip-env-checks` import it without the trainer's libraries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic.alias_generators import to_camel

from kuberl.api.algorithms import REGISTRY
from kuberl.api.types import RLExperiment

TaskKind = Literal["discrete-vector", "continuous-vector", "image"]
TASK_KINDS: tuple[TaskKind, ...] = ("discrete-vector", "continuous-vector", "image")
# How `kuberl train` names a set: "using the continuous-control defaults for ppo: ...".
KIND_LABELS: dict[TaskKind, str] = {
    "discrete-vector": "discrete-control",
    "continuous-vector": "continuous-control",
    "image": "image",
}
# The operator writes the rollouts and replay fields the manifest set into the head pod's experiment.yaml under
# this annotation: that file holds the whole spec, defaults included, so the trainer could not tell them apart.
SET_FIELDS_ANNOTATION = "kuberl.io/spec-fields-set"
DEFAULTABLE_SECTIONS = ("rollouts", "replay")

SOURCES: dict[str, str] = {
    "measured-cartpole": "measured here: the hyperparameter models' defaults, which solve CartPole-v1 and "
    "Acrobot-v1 (docs/benchmarks.md, tests/integration)",
    "cleanrl-ppo": "CleanRL ppo.py defaults (CartPole-v1 and Acrobot-v1, 500k steps: the learning rate annealed "
    "linearly to 0 over the run)",
    "cleanrl-ppo-continuous": "CleanRL ppo_continuous_action.py defaults, its reward normalization included "
    "(HalfCheetah-v4, 1M steps: 1,442 +- 46; here, with it, Walker2d-v5's worst of 4 seeds rose from 1,186 to 3,265: "
    "docs/benchmarks.md)",
    "measured-halfcheetah-ppo": "measured here: examples/halfcheetah-ppo.yaml's settings, HalfCheetah-v5 1M steps, "
    "worst of 3 seeds 1,794 (docs/benchmarks.md)",
    "cleanrl-ppo-atari": "CleanRL ppo_atari.py defaults (8 envs x 128 steps, 4 minibatches, 4 epochs), the same "
    "as RL Zoo's atari PPO",
    "rlzoo-dqn-atari": "RL Zoo hyperparams/dqn.yml, atari (lr 1e-4, batch 32, train every 4 steps, target every "
    "1,000 steps, 10% of 10M steps of exploration to 0.01, 100k buffer)",
    "rainbow-beta": "Hessel et al. 2018 (Rainbow): the importance-sampling exponent beta annealed from 0.4 to 1 over "
    "the whole of training, here the run's stop.timesteps (10M, RL Zoo's Atari budget, where it has none)",
    "cleanrl-dqn": "CleanRL dqn.py defaults (CartPole-v1, 500k steps: 488.69 +- 16.11): lr 2.5e-4, layers 120 and "
    "84, MSE loss, one update of 128 every 10 env steps after 10k, target every 500 env steps (50 updates), "
    "epsilon to 0.05, a uniform replay",
    "dqn-pixels-kept": "kuberl's DQN learner from pixels before the vector defaults became CleanRL's: double Q, "
    "dueling, 3-step returns, prioritized replay (Rainbow's parts; not trained to a score here)",
    "cleanrl-sac": "CleanRL sac_continuous_action.py defaults (5,000 random steps, a 1M uniform buffer, one "
    "update of 256 per env step)",
    "measured-sac-halfcheetah": "measured here: HalfCheetah-v5 300k steps, 1 env in-process, worst of 3 seeds "
    "5,870 (docs/benchmarks.md, bench/sac.py)",
    "apex-paper": "Horgan et al. 2018 (Ape-X) and examples/pong-apex.yaml: n-step 3, batch 512, 50k steps "
    "before learning, target every 2,500 updates, eps_i = 0.4^(1 + 7 i/(N-1)); the paper's learner trained on "
    "about 0.8 samples per env step",
    "rllib-appo-pong": "RLlib tuned_examples/appo/pong_appo.py (lr 5e-4 held constant, vf_loss_coeff 1.0, entropy 0.01, "
    "batches of 500, target network every 2 updates, broadcast every 5, a buffer of 4 batches used twice each) "
    "with RLlib's APPO defaults (clip_param 0.4, grad_clip 40), and pong-appo.yaml's 8 envs per worker and "
    "fragments of 50",
    "rllib-appo-cartpole": "RLlib tuned_examples/appo/cartpole_appo.py (entropy_coeff 0.0; 450 within 2M steps)",
    "rllib-impala-pong": "RLlib tuned_examples/impala/pong-impala-fast.yaml (fragments of 50, batches of 1,000, "
    "5 envs per worker, broadcast every 5 updates) with RLlib's IMPALA defaults (lr 5e-4, vf_loss_coeff 0.5, "
    "entropy 0.01, grad_clip 40)",
    "sac-images": "no published setting for SAC from pixels with continuous actions: CleanRL's SAC values with "
    "one env and a uniform 100k replay (a stacked 84x84x4 frame is 28 KB; 1M of them would not fit most machines)",
}
# Why a kind an algorithm can act in has no set: its values would be guesses.
NOT_MEASURED = ("none: no published or measured setting for this algorithm on continuous control, so the "
                "algorithm's own defaults apply (docs/manifest.md's hyperparameter tables)")


class RunBudget:
    """A set's value that is the run's step budget: `spec.stop.timesteps`, else `without` (resolved_defaults)."""

    def __init__(self, without: int) -> None:
        self.without = without

    def __repr__(self) -> str:
        return "stop.timesteps"


def _resolve_value(value: Any, experiment: RLExperiment) -> Any:
    if isinstance(value, RunBudget):
        return experiment.spec.stop.timesteps or value.without
    return value


@dataclass(frozen=True)
class Default:
    value: Any
    source: str  # a key of SOURCES


@dataclass(frozen=True)
class DefaultSet:
    """One algorithm's defaults for one task kind: manifest paths under `spec` to values and their sources."""

    values: dict[str, Default]
    note: str = ""  # why a set holds no values (NOT_MEASURED)

    def plain(self) -> dict[str, Any]:
        return {path: d.value for path, d in self.values.items()}


def _set(source: str, **values: Any) -> dict[str, Default]:
    """Values of one source; keys are paths with "__" for "." (config__lr: config.lr)."""
    return {key.replace("__", "."): Default(value, source) for key, value in values.items()}


_PPO_DISCRETE = {
    **_set("measured-cartpole", config__lr=2e-3, config__numEpochs=8, config__minibatchSize=256,
           config__entropyCoeff=0.0, rollouts__envsPerWorker=8, rollouts__fragmentLength=64),
    # CleanRL ppo.py anneals too. Measured: Acrobot-v1 at 500k ended at -80.1 / -80.2 annealed against -80.2 / -82.9
    # held constant (CleanRL: -82.48); CartPole held 500 on both seeds either way (docs/benchmarks.md).
    **_set("cleanrl-ppo", config__annealLr=True),
}
_DQN_DISCRETE = {
    **_set("cleanrl-dqn", config__lr=2.5e-4, config__hidden=[120, 84], config__loss="mse", config__gradClip=None,
           config__nStep=1, config__doubleQ=False, config__dueling=False, config__trainBatchSize=128,
           config__learningStarts=10_000, config__replayRatio=0.1, config__targetUpdateInterval=50,
           config__epsilonEnd=0.05, config__priorityAlpha=0.0, replay__capacity=10_000),
    # CleanRL anneals epsilon over half the run (250k of 500k); 10k held CartPole at 500 as well (docs/benchmarks.md)
    # and does not leave a shorter run exploring to its end. Its 10k buffer matters: with 100k one seed of two
    # fell from 500 to 197 in the last 60k steps.
    **_set("measured-cartpole", config__epsilonTimesteps=10_000),
}
_APEX_DISCRETE = {
    **_set("measured-cartpole", config__lr=5e-4, config__nStep=10, config__trainBatchSize=256,
           config__learningStarts=5_000, config__replayRatio=1 / 32, config__targetUpdateInterval=250),
    # One worker explores at the base itself: DQN's final 0.05 (measured: 500.0 / 489.4 on CartPole at 500k,
    # against 474.1 / 481.6 at 0.1, the training return being that worker's).
    **_set("cleanrl-dqn", config__workerEpsilonBase=0.05),
}
_IMPALA_DISCRETE = _set("measured-cartpole", config__lr=1e-3, config__entropyCoeff=0.01,
                        config__trainBatchSize=512, rollouts__fragmentLength=64)
_APPO_DISCRETE = {
    **_set("measured-cartpole", config__lr=1e-3, config__clipParam=0.4, config__bufferBatches=4, config__batchReuse=2,
           config__targetUpdateInterval=16, config__trainBatchSize=512, rollouts__fragmentLength=64),
    # Measured with 0.01: once every episode is capped the advantages vanish and the bonus alone moves the policy
    # (its entropy climbed from 0.08 to 0.49 over 600k steps at 500). The fall that followed came without a bonus
    # too; APPOParams' annealLr (on) is what held CartPole at 500 to the end of the budget.
    **_set("rllib-appo-cartpole", config__entropyCoeff=0.0),
}

DEFAULTS: dict[str, dict[TaskKind, DefaultSet]] = {
    "ppo": {
        "discrete-vector": DefaultSet(_PPO_DISCRETE),
        "continuous-vector": DefaultSet({
            **_set("cleanrl-ppo-continuous", config__lr=3e-4, config__annealLr=True, config__numEpochs=10,
                   config__minibatchSize=64, config__entropyCoeff=0.0, config__gradClip=0.5,
                   config__normalizeRewards=True),
            # CleanRL steps 1 env for 2,048 steps; 8 x 256 is the same batch (measured on HalfCheetah at 1M, worst
            # of the seeds: 1,794 without reward normalization, 1,562 with it; CleanRL's 1,442 is with it).
            **_set("measured-halfcheetah-ppo", config__observationFilter="mean_std", rollouts__envsPerWorker=8,
                   rollouts__fragmentLength=256),
        }),
        "image": DefaultSet(_set("cleanrl-ppo-atari", config__lr=2.5e-4, config__annealLr=True,
                                 config__clipParam=0.1, config__entropyCoeff=0.01, config__vfCoeff=0.5,
                                 config__numEpochs=4, config__minibatchSize=256, config__gradClip=0.5,
                                 rollouts__envsPerWorker=8, rollouts__fragmentLength=128)),
    },
    "dqn": {
        "discrete-vector": DefaultSet(_DQN_DISCRETE),
        "image": DefaultSet({
            **_set("rlzoo-dqn-atari", config__lr=1e-4, config__trainBatchSize=32, config__learningStarts=100_000,
                   config__replayRatio=0.25, config__targetUpdateInterval=250, config__epsilonEnd=0.01,
                   config__epsilonTimesteps=1_000_000, config__gradClip=10.0, config__loss="huber",
                   replay__capacity=100_000),
            **_set("dqn-pixels-kept", config__nStep=3, config__doubleQ=True, config__dueling=True,
                   config__priorityAlpha=0.6),
            # DQNParams' 100k steps of annealing would end when learning starts (learningStarts: 100k)
            **_set("rainbow-beta", config__priorityBetaTimesteps=RunBudget(10_000_000)),
        }),
    },
    "apex-dqn": {
        "discrete-vector": DefaultSet(_APEX_DISCRETE),
        "image": DefaultSet(_set("apex-paper", config__lr=1e-4, config__nStep=3, config__trainBatchSize=512,
                                 config__learningStarts=50_000, config__targetUpdateInterval=2_500,
                                 config__workerEpsilonBase=0.4, config__weightSyncInterval=50,
                                 config__gradClip=40.0, config__replayRatio=1 / 512, replay__capacity=1_000_000)),
    },
    "impala": {
        "discrete-vector": DefaultSet(_IMPALA_DISCRETE),
        "continuous-vector": DefaultSet({}, note=NOT_MEASURED),
        "image": DefaultSet(_set("rllib-impala-pong", config__lr=5e-4, config__vfCoeff=0.5,
                                 config__entropyCoeff=0.01, config__gradClip=40.0, config__trainBatchSize=1_000,
                                 config__broadcastInterval=5, rollouts__envsPerWorker=5,
                                 rollouts__fragmentLength=50)),
    },
    "appo": {
        "discrete-vector": DefaultSet(_APPO_DISCRETE),
        "continuous-vector": DefaultSet({}, note=NOT_MEASURED),
        "image": DefaultSet(_set("rllib-appo-pong", config__lr=5e-4, config__annealLr=False, config__vfCoeff=1.0,
                                 config__entropyCoeff=0.01, config__clipParam=0.4, config__gradClip=40.0,
                                 config__trainBatchSize=500, config__targetUpdateInterval=2,
                                 config__broadcastInterval=5, config__bufferBatches=4, config__batchReuse=2,
                                 rollouts__envsPerWorker=8, rollouts__fragmentLength=50)),
    },
    "sac": {
        "continuous-vector": DefaultSet({
            **_set("cleanrl-sac", config__lr=3e-4, config__criticLr=1e-3, config__alphaLr=1e-3,
                   config__trainBatchSize=256, config__replayRatio=1.0, config__learningStarts=5_000,
                   replay__capacity=1_000_000, replay__prioritized=False),
            **_set("measured-sac-halfcheetah", rollouts__envsPerWorker=1),
        }),
        "image": DefaultSet(_set("sac-images", config__lr=3e-4, config__criticLr=1e-3, config__alphaLr=1e-3,
                                 config__trainBatchSize=256, config__learningStarts=5_000,
                                 replay__capacity=100_000, replay__prioritized=False, rollouts__envsPerWorker=1)),
    },
}


def applicable_kinds(algorithm: str) -> tuple[TaskKind, ...]:
    """The task kinds `algorithm` can act in, from the registry's action spaces (image: any of them)."""
    actions = REGISTRY[algorithm].action_spaces
    kinds: list[TaskKind] = []
    if "Discrete" in actions:
        kinds.append("discrete-vector")
    if "Box" in actions:
        kinds.append("continuous-vector")
    kinds.append("image")
    return tuple(kinds)


def task_kind(action_space: str, image_observations: bool) -> TaskKind:
    """The kind of a task from its action space's class name ("Discrete", "Box") and whether it observes images."""
    if image_observations:
        return "image"
    return "continuous-vector" if action_space == "Box" else "discrete-vector"


def kind_without_env(experiment: RLExperiment) -> TaskKind | None:
    """The kind when the env need not be built (`env.preprocessing: atari` makes images); else None."""
    return "image" if experiment.spec.env.preprocessing == "atari" else None


def user_set_paths(experiment: RLExperiment) -> set[str]:
    """The defaultable paths the manifest sets: keys of `config`, and fields of `rollouts` and `replay` (from
    the operator's annotation where the manifest came through the operator)."""
    spec = experiment.spec
    paths = {f"config.{to_camel(key)}" for key in spec.config}
    annotations = (experiment.metadata.model_extra or {}).get("annotations") or {}
    written = annotations.get(SET_FIELDS_ANNOTATION) if isinstance(annotations, dict) else None
    if isinstance(written, str):
        return paths | {p for p in written.split(",") if p}
    for section in DEFAULTABLE_SECTIONS:
        if section in spec.model_fields_set:
            model = getattr(spec, section)
            paths |= {f"{section}.{to_camel(name)}" for name in model.model_fields_set}
    return paths


def spec_fields_set(experiment: RLExperiment) -> str:
    """SET_FIELDS_ANNOTATION's value: the rollouts and replay fields the manifest set, comma-separated."""
    return ",".join(sorted(p for p in user_set_paths(experiment) if not p.startswith("config.")))


def _train_batch(experiment: RLExperiment, values: dict[str, Any]) -> int:
    rollouts = experiment.spec.rollouts
    envs: int = values.get("rollouts.envsPerWorker", rollouts.envs_per_worker)
    fragment: int = values.get("rollouts.fragmentLength", rollouts.fragment_length)
    return envs * fragment * max(1, rollouts.workers)


def resolved_defaults(experiment: RLExperiment, kind: TaskKind) -> tuple[str, dict[str, Any]]:
    """(the set's name, the values it sets that the manifest does not), keyed by manifest paths under `spec`.

    The name is "<kind label> defaults for <algorithm>"; where the algorithm cannot act in `kind` (dqn with
    continuous actions, which the env checks refuse) or its set is empty (`set_note`) the values are empty. PPO's
    minibatch is cut to the train batch where the manifest's rollouts make that smaller; the priority settings
    are left out where the replay is uniform (replay.prioritized false); a RunBudget value is the run's
    stop.timesteps.
    """
    algorithm = experiment.spec.algorithm
    name = f"{KIND_LABELS[kind]} defaults for {algorithm}"
    chosen = DEFAULTS[algorithm].get(kind)
    if chosen is None:
        return name, {}
    taken = user_set_paths(experiment)
    values = {path: _resolve_value(value, experiment) for path, value in chosen.plain().items() if path not in taken}
    if "config.minibatchSize" in values:
        values["config.minibatchSize"] = min(values["config.minibatchSize"], _train_batch(experiment, values))
    if not values.get("replay.prioritized", experiment.spec.replay.prioritized):
        # a uniform replay reads no priority settings: the set's would be refused as having no effect
        values = {path: value for path, value in values.items() if not path.startswith("config.priority")}
    if experiment.spec.stop.timesteps is None:
        # annealing runs over the step budget: with none there is nothing to anneal over, so the rate stays the
        # algorithm's own (constant) instead of the trainer warning about a value the manifest never set
        values.pop("config.annealLr", None)
    return name, values


def with_values(experiment: RLExperiment, values: dict[str, Any]) -> RLExperiment:
    """The experiment with `values` (manifest paths under spec) written in, validated again."""
    from kuberl.api.validation import validate_document

    doc = experiment.to_manifest()
    doc.pop("status", None)
    for path, value in values.items():
        node = doc["spec"]
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return validate_document(doc)


def set_note(algorithm: str, kind: TaskKind) -> str:
    """Why `algorithm` has no values for `kind` (empty where it has a set, or cannot act in the kind)."""
    chosen = DEFAULTS[algorithm].get(kind)
    return chosen.note if chosen is not None else ""


def _shown(value: Any) -> str:
    if value is None:
        return "null"  # as a manifest writes it
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value).replace(" ", "")


def defaults_line(name: str, values: dict[str, Any], note: str = "") -> str:
    """`kuberl train`'s and `kuberl validate`'s line: what the defaults set and the manifest did not; `note`: why
    there is no set."""
    if note:
        return f"no {name}: {note.removeprefix('none: ')}"
    if not values:
        return f"using the {name}: nothing to add, the manifest sets every value they hold"
    shown = ", ".join(f"{path.removeprefix('config.')}={_shown(value)}" for path, value in values.items())
    return f"using the {name}: {shown}"


def defaults_line_without_env(experiment: RLExperiment) -> str:
    """The defaults line where no env is built (`kuberl validate --skip-env-checks`, as the operator): the kind
    is known only from `env.preprocessing: atari`; otherwise the trainer chooses when it starts, in the head pod."""
    kind = kind_without_env(experiment)
    if kind is None:
        return ("task-kind defaults: chosen by the trainer when it starts, from the env's spaces "
                "(--skip-env-checks builds no env)")
    name, values = resolved_defaults(experiment, kind)
    spec = experiment.spec
    later = spec.algorithm == "apex-dqn" or spec.rollouts.workers == 0
    return defaults_line(name, values) + ("; the machine's values (envsPerWorker, Ape-X's replayRatio) are "
                                          "chosen when training starts" if later else "")


_KIND_MEANING: dict[TaskKind, str] = {
    "discrete-vector": "a vector Box observation and Discrete actions (CartPole-v1, Acrobot-v1, LunarLander-v3)",
    "continuous-vector": "a vector Box observation and Box actions (Pendulum-v1, HalfCheetah-v5, Hopper-v5)",
    "image": "uint8 image observations, such as `env.preprocessing: atari` (ALE/Pong-v5)",
}


def reference_sections() -> list[str]:
    """docs/manifest.md's section on these defaults (kuberl.api.reference renders it)."""
    out = [
        "## Defaults by task kind",
        "",
        "A manifest that leaves a value below unset trains with it: `kuberl train` detects the kind of task from the "
        "env's spaces and prints one line, `using the continuous-control defaults for ppo: lr=0.0003, ...`, listing "
        "what the defaults set and the manifest did not; the first results line records them under `defaults`, and "
        "the run's `experiment.yaml` holds them. Anything the manifest sets wins, field by field (`spec.config` keys, "
        "`spec.rollouts` and `spec.replay` fields). `kuberl validate` prints the same line; with `--skip-env-checks` "
        "(the operator's path, which builds no env) only `env.preprocessing: atari` tells the kind, and otherwise "
        "the trainer chooses when it starts in the head pod. The operator writes the rollouts and replay fields the "
        f"manifest set into the head's experiment.yaml as the annotation `{SET_FIELDS_ANNOTATION}`. Values not "
        "listed are the hyperparameter tables' defaults above, which are also what the Python builder "
        "(`PPOConfig()...`) uses: it applies no task-kind set.",
        "",
        "Chosen for the machine when training starts (recorded under `defaults.machine` in the first results line; "
        "`cores` there is what the trainer may use: its CPU affinity within the container's CPU limit, so a pod "
        "counts its `resources.limits.cpu`, not the node's CPUs):",
        "",
        "- `rollouts.envsPerWorker` for images sampled in the learner's process (`rollouts.workers: 0`): at least "
        "one env a core (ALE's vector env steps them on a thread a core), at most 64. The fragment keeps its length "
        "(PPO's 128 steps are its GAE horizon), so PPO's train batch grows with the envs and its minibatches keep "
        "their size: 64 cores make 64 x 128 = 8,192 rows, 32 minibatches of 256. Vector envs step on one thread: "
        "cores change nothing.",
        "- `learner.bf16: auto` (the default) as the learner resolves it on its device (`defaults.machine.bf16`): "
        "bfloat16 autocast for a conv encoder on a GPU of compute capability 8.0 or later, float32 elsewhere, on "
        "every CPU included (`true` turns it on there).",
        "- Ape-X's `replayRatio` (learner updates per env step that sampling waits for): measured at start from a few "
        "updates of the network on the env's shape and a few hundred steps of one env; images aim at 1 replayed "
        "sample per env step (the paper's learner: about 0.8) and fall to what the learner sustains against the "
        "workers' full speed, down to 0.25; vector tasks keep 8, the ratio that learns CartPole here. A learner on a "
        "GPU keeps the published ratio (not measured: the driver leaves CUDA to the learner).",
    ]
    for kind in TASK_KINDS:
        label = f" ({KIND_LABELS[kind]})" if KIND_LABELS[kind] != kind else ""
        out += ["", f"### {kind}{label}: {_KIND_MEANING[kind]}", "",
                "| algorithm | field | default | source |", "|---|---|---|---|"]
        for algorithm in REGISTRY:
            chosen = DEFAULTS[algorithm].get(kind)
            if chosen is None:
                out.append(f"| `{algorithm}` | | not applicable: it cannot act in this kind "
                           f"({' or '.join(REGISTRY[algorithm].action_spaces)} actions) | |")
                continue
            if chosen.note:
                out.append(f"| `{algorithm}` | | {chosen.note} | |")
            for path, default in chosen.values.items():
                out.append(f"| `{algorithm}` | `spec.{path}` | `{_shown(default.value)}` | {default.source} |")
    out += ["", "### Sources", "", *[f"- `{key}`: {text}" for key, text in SOURCES.items()]]
    return out
