"""The RLExperiment resource: the one source of truth for its spec and status.

`crds/rlexperiment.yaml` is generated from these models (`make crds`); the
operator and `kuberl train` both validate manifests with them. Field names are
the manifest's camelCase names; Python code uses the snake_case attributes.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from kuberl.api.algorithms import ALGORITHM_NAMES
from kuberl.api.base import StrictModel
from kuberl.api.hyperparams import ConvLayer, LayerWidth
from kuberl.api.podtemplate import template_schema

GROUP: Final = "kuberl.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "kuberl.io/v1alpha1"  # GROUP/VERSION written out: the literal type the envelope's field takes
KIND: Final = "RLExperiment"
PLURAL = "rlexperiments"
SINGULAR = "rlexperiment"
SHORT_NAMES = ["rlx"]

Algorithm = Literal[ALGORITHM_NAMES]  # type: ignore[valid-type]  # the registry's names, so the CRD's enum
ExportFormat = Literal["onnx", "torchscript"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)


class Phase(StrEnum):
    """Where the experiment is in its lifecycle."""

    PENDING = "Pending"
    QUEUED = "Queued"
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})

# Kubernetes resource quantities ("500m", "2", "1.5", "4Gi", "512M").
CPU_PATTERN = r"^[0-9]+(\.[0-9]+)?m?$"
MEMORY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
STORAGE_URI_PATTERN = r"^(s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?|file://.+)$"
ENDPOINT_PATTERN = r"^https?://[^\s/]+(/.*)?$"
# A DNS-1123 subdomain, as Kubernetes requires for object names.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# A label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
IMAGE_PATTERN = r"^\S+$"  # an image reference has no whitespace
# "package.module:Class": dotted module, a colon, a class name.
CLASS_PATH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"


FreeForm = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
_INT_OR_STRING = {"x-kubernetes-int-or-string": True}
CpuQuantity = Annotated[
    Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=CPU_PATTERN)], Field(json_schema_extra=_INT_OR_STRING)
]
MemoryQuantity = Annotated[
    Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=MEMORY_PATTERN)], Field(json_schema_extra=_INT_OR_STRING)
]


# A dotted Python name ("pkg.module", "Class"): what spec.env.id holds on either side of a colon when it names Python
# code (a class, a factory, a PettingZoo module) rather than a Gymnasium id.
PYTHON_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
WRAPPER_NAME_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(\.[A-Za-z_]\w*|:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)$"


class WrapperSpec(StrictModel):
    name: str = Field(min_length=1, max_length=253, json_schema_extra={"pattern": WRAPPER_NAME_PATTERN},
                      description='A gymnasium.Wrapper: "gymnasium.wrappers.ClipAction" or "package.module:Class"; for '
                      'a multi-agent env, a callable taking the ParallelEnv: "supersuit:resize_v1".')
    kwargs: FreeForm = Field(default_factory=dict, description="Keyword arguments for the wrapper.")

    @field_validator("name")
    @classmethod
    def _import_path(cls, name: str) -> str:
        if not re.match(WRAPPER_NAME_PATTERN, name):
            raise ValueError(f"{name[:64]!r} is not an import path: write gymnasium.wrappers.Name or "
                             "package.module:Class")
        return name


class EnvSpec(StrictModel):
    id: str = Field(
        min_length=1, max_length=253,
        description='A registered Gymnasium id ("CartPole-v1", "ALE/Pong-v5": the ALE namespace imports ale_py), '
        'Gymnasium\'s "module:EnvId" form ("ale_py:ALE/Pong-v5": import the module, which registers the id), or a '
        'class "package.module:Class". After a colon, a Python name (letters, digits, _ and dots) is a class; '
        'anything with a "/" namespace or a "-vN" version is an env id. Multi-agent (PettingZoo, docs/multi-agent.md): '
        '"package:env_module" ("mpe2:simple_spread_v3": the module\'s parallel_env) or "package.module:factory" '
        'returning a ParallelEnv; config is passed to it.',
    )
    config: FreeForm = Field(default_factory=dict, description="Keyword arguments for the env constructor.")
    preprocessing: Literal["none", "atari"] = Field(
        "none",
        description="atari: the DeepMind preset for an ALE env: up to 30 no-op starts, frame skip 4 with "
        "max-pooling, 84x84 grayscale, 4 stacked frames (uint8 observations of shape [4, 84, 84]), fire reset; for "
        "training also episodic life and rewards clipped to [-1, 1]. The reported episode return is the unclipped "
        "score of the whole game. Sticky actions: ALE v5 repeats the previous action with probability 0.25 unless "
        "env.config.repeat_action_probability sets it (published Pong runs of CleanRL, EnvPool and RLlib use 0.0). "
        "Rollout workers step ALE's own vector env (the same frames, preprocessed in C++) when config holds no more "
        "than repeat_action_probability, full_action_space and max_num_frames_per_episode and there are no "
        "wrappers; otherwise, and in evaluation, single envs (made with frameskip=1) on Gymnasium's wrappers.",
    )
    wrappers: list[WrapperSpec] = Field(
        default_factory=list, max_length=32,
        description="Wrappers applied in order, after any preprocessing: a list of {name, kwargs}, name a "
        "gymnasium.Wrapper as \"gymnasium.wrappers.ClipAction\" or \"package.module:Class\". A multi-agent "
        "(PettingZoo) env takes callables that wrap its ParallelEnv, such as SuperSuit's (\"supersuit:resize_v1\", "
        "\"supersuit:frame_stack_v1\"; docs/multi-agent.md).",
    )


class RolloutsSpec(StrictModel):
    workers: int = Field(0, ge=0, le=1024, description="Rollout worker actors; 0 samples in the learner's process "
                         "(apex-dqn samples only on them: 1 or more).")
    envs_per_worker: int = Field(8, ge=1, le=4096, description="Vectorised envs each worker steps.")
    fragment_length: int = Field(64, ge=1, le=100_000, description="Steps per env in each sample batch.")
    env_threads: int | None = Field(
        None, ge=1, le=256,
        description="Threads that step each worker's envs (ALE's vector env under env.preprocessing: atari; other "
        "envs step on one). Unset: 1 in each rollout worker actor (the workers are the parallelism), and the "
        "cores the trainer may use (its CPU affinity within the container's CPU limit; at most envsPerWorker) "
        "when workers is 0.",
    )
    env_groups: int = Field(
        1, ge=1, le=16,
        description="Groups each worker's envs are split into, stepped in turn: with 2, one group's envs step on the "
        "env threads (envThreads each) while the policy picks the other group's actions, so the envs and the policy "
        "do not wait for each other (double-buffered sampling; it pays where the policy's time per call hardly grows "
        "with the batch, as on a GPU, and the envs are many). Only ALE's vector env (env.preprocessing: atari) steps "
        "a group in the background; other envs give the same transitions without the overlap. The transitions are "
        "the same as with 1 group; envsPerWorker must divide into the groups.",
    )


class ReplaySpec(StrictModel):
    shards: int | None = Field(
        None, ge=0, le=256,
        description="Replay shard actors that rollout workers add to and the learner samples from. apex-dqn always "
        "uses shards (unset: 1); sac uses them when this is set >= 1, which needs rollouts.workers >= 1 to feed them, "
        "else one buffer in the learner (unset, or 0); dqn keeps one buffer in the learner (unset or 1).",
    )
    capacity: int = Field(100_000, ge=1, le=1_000_000_000, description="Transitions kept, split across the shards.")
    prioritized: bool = Field(True, description="Proportional prioritized replay; false samples uniformly.")


# auto, true or false: a scalar of two JSON types, which a structural schema can only say with an untyped node
# (kuberl.api.crd leaves a node marked x-kuberl-scalar untyped) and an enum.
Bf16Setting = Annotated[Literal["auto"] | bool, WithJsonSchema({
    "enum": ["auto", True, False], "x-kubernetes-preserve-unknown-fields": True, "x-kuberl-scalar": True})]


class LearnerSpec(StrictModel):
    gpus: int = Field(
        0, ge=0, json_schema_extra={"maximum": 1},
        description="GPUs the learner trains on (0 or 1: the learner is not data-parallel); with 1 it trains on "
        "CUDA. In a cluster the head pod must have the GPU (spec.head.gpus): the learner trains in the "
        "trainer's process there, except apex-dqn's and sac's with replay shards, a Ray actor that may run "
        "on a worker pod with one (spec.workers.gpus). Rollout workers sample on CPUs.",
    )

    bf16: Bf16Setting = Field(
        "auto",
        description="Run the learner's encoder passes under bfloat16 autocast (weights, optimizer, heads and "
        "targets stay float32): auto, true or false. auto turns it on for a conv encoder (image observations) "
        "on a GPU of compute capability 8.0 or later; on a CPU the learner trains in float32, whatever its "
        "instruction set. true turns it on anywhere: on a CPU with avx512_bf16 or amx_bf16 among its "
        "/proc/cpuinfo flags it steps a conv learner about 1.3x faster but may learn less per env step; on a "
        "device without native bfloat16 it warns: it is emulated there, roughly an order of magnitude slower per "
        "minibatch. The choice is printed at start and recorded (the run record's learner.bf16).",
    )
    threads: int | None = Field(
        None, ge=1, le=256,
        description="torch's intra-op threads in the learner's process (with rollouts.workers: 0, the sampling "
        "policy's too). Unset: 1 ($KUBERL_TORCH_THREADS overrides), fastest for small networks on a shared "
        "machine; a conv learner with the machine to itself runs faster on all its cores.",
    )

    @field_validator("bf16", mode="before")
    @classmethod
    def _bf16_setting(cls, value: Any) -> Any:
        if value != "auto" and not isinstance(value, bool):
            raise ValueError(f"is {value!r}; use auto, true or false")
        return value

    @field_validator("gpus")
    @classmethod
    def _one_gpu(cls, gpus: int) -> int:
        if gpus > 1:
            raise ValueError(f"is {gpus}, but the learner trains on at most 1 GPU (it is not data-parallel): "
                             "set 1 (rollout workers sample on CPUs, so more GPUs would sit idle)")
        return gpus


class StopSpec(StrictModel):
    timesteps: int | None = Field(None, ge=1, description="Stop after this many env steps.")
    episode_return_mean: float | None = Field(None, description="Stop once the 100-episode return mean reaches this.")
    time_seconds: int | None = Field(None, ge=1, description="Stop after this much training time.")
    iterations: int | None = Field(None, ge=1, description="Stop after this many training iterations.")
    evaluation_return_mean: float | None = Field(
        None, description="Stop once an evaluation's return mean reaches this (needs spec.evaluation)."
    )


class CheckpointSpec(StrictModel):
    every_iterations: int = Field(10, ge=1, description="Write a checkpoint every N iterations (and at the end).")
    keep: int = Field(5, ge=1, le=1000, description="Complete checkpoints kept; older ones are deleted.")
    keep_best: bool = Field(
        False, description="Keep the checkpoint with the best evaluation return apart from `keep` "
        "(checkpoints/best names it; needs spec.evaluation).",
    )
    export: list[ExportFormat] = Field(
        default_factory=list, max_length=2, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Export the greedy policy with every checkpoint into exports/ (onnx, torchscript): a file that "
        "computes actions from observations without kuberl.",
    )
    restore_from: str | None = Field(
        None, pattern=STORAGE_URI_PATTERN, max_length=1024,
        description="Start from another run's checkpoint when this run has none of its own: a run root "
        "(its newest checkpoint) or .../checkpoints/N, s3:// (read with spec.storage's endpoint and credentials) "
        "or file://. The learner's weights, optimizer state, observation statistics and counters (iteration, "
        "timesteps: stop.timesteps counts on from them) come from it; the hyperparameters, the learning rate "
        "included, are this manifest's; the random state is this run's seed. Same algorithm and spaces only.",
    )

    @field_validator("export")
    @classmethod
    def _unique_formats(cls, formats: list[str]) -> list[str]:
        if len(set(formats)) != len(formats):
            raise ValueError("each format at most once")
        return formats


class MLflowSpec(StrictModel):
    uri: str = Field(pattern=ENDPOINT_PATTERN, max_length=1024,
                     description="The MLflow tracking server, e.g. http://mlflow.mlflow:5000.")
    experiment: str | None = Field(
        None, min_length=1, max_length=500,
        description="MLflow experiment the run is logged into; default: the RLExperiment's name.",
    )


class WandbKeyRef(StrictModel):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                      description="Secret in the experiment's namespace holding the W&B API key.")
    key: str = Field("WANDB_API_KEY", min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$",
                     description="The Secret's key whose value is the API key.")


class WandbSpec(StrictModel):
    project: str = Field(min_length=1, max_length=128, description="W&B project the run is logged into.")
    entity: str | None = Field(None, min_length=1, max_length=128,
                               description="W&B entity (user or team); default: the API key's default entity.")
    group: str | None = Field(None, min_length=1, max_length=128, description="W&B run group.")
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=64, description="W&B run tags.")
    mode: Literal["online", "offline", "disabled"] = Field(
        "online", description="online: log to the W&B server; offline: write W&B's run files into the run's "
        "storage (wandb/) for `wandb sync`; disabled: no W&B.")
    api_key_secret_ref: WandbKeyRef | None = Field(
        None, description="Secret whose key holds the API key, put into the head pod as WANDB_API_KEY "
        "(never in the spec). Locally the trainer reads WANDB_API_KEY or `wandb login`.")


class TrackingSpec(StrictModel):
    mlflow: MLflowSpec | None = Field(
        None, description="Log params, metrics, the final checkpoint and the exported policy to MLflow "
        "(needs the trainer's mlflow extra; never stops training when the server is away).",
    )
    wandb: WandbSpec | None = Field(
        None, description="Log the config, metrics by env step, evaluation videos, the final checkpoint and "
        "the exported policy to Weights & Biases (the trainer's wandb extra; never stops training).",
    )


class VideoSpec(StrictModel):
    every_evaluations: int = Field(
        1, ge=1, le=1_000_000,
        description="Record one episode of the first evaluation and of every Mth after it (MP4 under videos/).",
    )


class EvaluationSpec(StrictModel):
    interval: int = Field(ge=1, le=1_000_000, description="Evaluate every N training iterations (and at the end).")
    episodes: int = Field(10, ge=1, le=100_000, description="Episodes per evaluation.")
    workers: int = Field(
        0, ge=0, le=1024,
        description="Evaluation actors playing in parallel with training; 0 plays in the learner's process "
        "(training waits).",
    )
    explore: bool = Field(False, description="False: the greedy policy; true: the exploring one.")
    env_config: FreeForm = Field(
        default_factory=dict, description="Merged over spec.env.config for the evaluation envs only."
    )
    video: VideoSpec | None = Field(None, description="Record evaluation episodes as MP4 videos.")


class TracesSpec(StrictModel):
    enabled: bool = Field(True, description="Write one JSON record per finished episode.")
    steps: bool = Field(False, description="Also record per-step obs, action and reward.")


class SecretRef(StrictModel):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                      description="The Secret's name, in the experiment's namespace.")


class StorageSpec(StrictModel):
    uri: str | None = Field(
        None, pattern=STORAGE_URI_PATTERN, max_length=1024,
        description="s3://bucket/prefix or file:///path; `kuberl train` defaults to ./kuberl-runs/.",
    )
    endpoint: str | None = Field(None, pattern=ENDPOINT_PATTERN, max_length=1024, description="S3-compatible endpoint URL.")
    region: str | None = Field(None, max_length=64, description="S3 region (default from the AWS config chain).")
    secret_ref: SecretRef | None = Field(
        None, description="Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY keys."
    )


LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]


class Toleration(StrictModel):
    key: str | None = Field(None, max_length=317, pattern=f"({LABEL_KEY_PATTERN})|^$",
                            description="The taint key the toleration matches; empty with Exists: every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Equal (the default) matches key and "
                                                       "value; Exists matches the key whatever its value.")
    value: LabelValue | None = Field(None, description="The taint value to match (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="The taint effect to match; empty: every effect.")
    toleration_seconds: int | None = Field(None, ge=0, description="NoExecute: how long the pod stays on a node "
                                           "that gets the taint; unset: forever.")


# A partial PodTemplateSpec; its schema is cut from the Kubernetes API (podtemplate.py), and
# validation.py checks it with the field paths named (a pydantic error could only name the template).
PodTemplate = Annotated[dict[str, Any], WithJsonSchema(template_schema())]


class PodSpec(StrictModel):
    cpu: CpuQuantity = Field("2", description="CPU request and limit.")
    memory: MemoryQuantity = Field("4Gi", description="Memory request and limit.")
    gpus: int = Field(0, ge=0, le=16, description='Whole GPUs, as the "nvidia.com/gpu" limit.')
    node_selector: dict[str, LabelValue] = Field(default_factory=dict,
                                                 description="Node labels the pod must be scheduled on.")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64,
                                          description="Taints the pod tolerates (a pod's tolerations).")
    template: PodTemplate | None = Field(None, description=template_schema()["description"])

    @field_validator("node_selector")
    @classmethod
    def _label_keys(cls, selector: dict[str, str]) -> dict[str, str]:
        # The CRD schema cannot constrain map keys; the API server would refuse the pod instead.
        for key in selector:
            if len(key) > 317 or not re.match(LABEL_KEY_PATTERN, key):
                shown = key if len(key) <= 64 else f"{key[:64]}...({len(key)} characters)"
                raise ValueError(f"{shown!r} is not a label key (an optional DNS prefix and '/', then a name)")
        return selector


class WorkersSpec(PodSpec):
    replicas: int = Field(0, ge=0, le=1000, description="Ray worker pods beside the head.")
    cpu: CpuQuantity = Field("4", description="CPU request and limit.")
    memory: MemoryQuantity = Field("8Gi", description="Memory request and limit.")


class SchedulingSpec(StrictModel):
    gang: bool = Field(False, description="Schedule the head and workers all at once (the scheduler's PodGroup).")
    scheduler_name: Literal["volcano", "scheduler-plugins"] = Field(
        "volcano", description="volcano (scheduling.volcano.sh PodGroup) or scheduler-plugins "
                               "(scheduling.x-k8s.io PodGroup, the coscheduling plugin).")


# A policy's name: it names checkpoint folders, metrics and exports, so a DNS label with underscores.
POLICY_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9_]{0,61}[a-z0-9])?$"
AGENT_PATTERN_PATTERN = r"^\S+$"


class PolicyModelSpec(StrictModel):
    """A policy's own network, over the one spec.config describes."""

    hidden: list[LayerWidth] | None = Field(None, min_length=1, max_length=8,
                                            description="MLP widths for vector observations (spec.config.hidden).")
    activation: Literal["tanh", "relu"] | None = Field(None, description="spec.config.activation.")
    conv: list[ConvLayer] | None = Field(None, min_length=1, max_length=8,
                                         description="Conv layers for images (spec.config.model.conv).")
    conv_hidden: list[LayerWidth] | None = Field(None, max_length=4,
                                                 description="Dense layers after the conv stack "
                                                 "(spec.config.model.hidden).")


class PolicySpec(StrictModel):
    name: str = Field(min_length=1, max_length=63, pattern=POLICY_NAME_PATTERN,
                      description="The policy's name (checkpoint folders, metrics, exports).")
    agents: list[Annotated[str, Field(min_length=1, max_length=253, pattern=AGENT_PATTERN_PATTERN)]] = Field(
        min_length=1, max_length=1024,
        description='The agents this policy acts for: exact agent ids ("speaker_0") or glob patterns '
        '("adversary_*", "*"). An exact id wins over a pattern; among patterns, the first policy listed wins.',
    )
    config: FreeForm = Field(default_factory=dict,
                             description="Hyperparameters of this policy's learner, over spec.config (lr, gamma, ...).")
    model: PolicyModelSpec | None = Field(None, description="This policy's network, over spec.config's.")


class MultiAgentSpec(StrictModel):
    policies: list[PolicySpec] = Field(
        default_factory=list, max_length=64,
        description="The policies and the agents each serves. Empty (the default, and with no multiAgent at all): "
        "one policy, shared, that every agent acts with (parameter sharing).",
    )
    policies_to_train: list[Annotated[str, Field(min_length=1, max_length=63)]] | None = Field(
        None, max_length=64,
        description="The policies that learn; the others act with the weights they start with (or restore). "
        "Unset: all of them.",
    )
    agent_id_feature: bool = Field(
        False, description="Append a one-hot of the agent's index among its policy's agents to each observation "
        "(vector observations only), so that a shared policy can tell its agents apart.",
    )


class RLExperimentSpec(StrictModel):
    algorithm: Algorithm = Field(description=" | ".join(ALGORITHM_NAMES))
    env: EnvSpec = Field(description="The environment: its id, constructor arguments, preprocessing and "
                         "wrappers.")
    config: FreeForm = Field(default_factory=dict, description="Algorithm hyperparameters (lr, gamma, ...).")
    rollouts: RolloutsSpec = Field(default_factory=RolloutsSpec,
                                   description="Sampling: rollout workers, envs per worker, steps per batch.")
    replay: ReplaySpec = Field(default_factory=ReplaySpec,
                               description="The replay buffer of the off-policy algorithms (dqn, apex-dqn, sac).")
    learner: LearnerSpec = Field(default_factory=LearnerSpec, description="Where and how the learner trains.")
    stop: StopSpec = Field(default_factory=StopSpec,
                           description="When training ends: the first criterion met stops it.")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec,
                                       description="Checkpoint cadence, retention, exports and restoring.")
    traces: TracesSpec = Field(default_factory=TracesSpec, description="Episode traces written to storage.")
    storage: StorageSpec = Field(default_factory=StorageSpec,
                                 description="Where checkpoints, results and traces go.")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec,
                                   description="Experiment trackers: MLflow, Weights & Biases.")
    evaluation: EvaluationSpec | None = Field(None, description="Evaluation during training.")
    multi_agent: MultiAgentSpec | None = Field(
        None, description="Policies of a multi-agent env (a PettingZoo env in env.id) and the agents each serves; "
        "unset: one policy shared by all agents.",
    )
    callbacks: str | None = Field(
        None, max_length=253, pattern=CLASS_PATH_PATTERN,
        description='"package.module:Class": a subclass of kuberl.trainer.run.callbacks.Callbacks, '
        "imported in the trainer.",
    )
    image: str | None = Field(None, max_length=1024, pattern=IMAGE_PATTERN,
                              description="Trainer image; default from the operator's settings.")
    head: PodSpec = Field(default_factory=PodSpec, description="The head pod: the Ray head and the trainer.")
    workers: WorkersSpec = Field(default_factory=WorkersSpec,
                                 description="The Ray worker pods that host rollout workers and replay shards.")
    backoff_limit: int = Field(3, ge=0, le=100, description="Head restarts before the experiment fails.")
    suspend: bool = Field(False, description="True deletes the pods and keeps storage; false again resumes.")
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, le=2**31 - 1,  # an int32, as in a Job: the operator adds it to a timestamp
        description="Delete the pods this long after Succeeded/Failed (the resource stays).",
    )
    service_account_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                                             description="The pods' ServiceAccount; unset: the namespace's "
                                             "default.")
    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                                           description="The pods' PriorityClass; also the gang PodGroup's.")
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec,
                                       description="Gang scheduling of the head and workers.")


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StrictModel):
    """A metav1.Condition."""

    type: str
    status: ConditionStatus
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class Failure(StrictModel):
    """A head failure, counted against backoffLimit."""

    attempt: int
    reason: str = Field(description="HeadFailed, or OOMKilled when the head ran out of memory.")
    message: str


class RLExperimentStatus(StrictModel):
    # Not strict: the API server's JSON holds the phase's value, not the enum.
    phase: Phase | None = Field(None, strict=False)
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    attempt: int | None = Field(None, description="Execution attempt; increases on every head (re)start.")
    workers: int | None = Field(None, description="Ready worker pods (the scale subresource's replicas).")
    selector: str | None = Field(None, description="Label selector of the worker pods (scale subresource).")
    iteration: int | None = None
    timesteps: int | None = None
    episode_return_mean: float | None = None
    evaluation_return_mean: float | None = Field(None, description="Return mean of the latest evaluation.")
    last_checkpoint: str | None = None
    message: str | None = None
    start_time: str | None = None
    completion_time: str | None = None
    last_failure: Failure | None = Field(
        None, description="The last head failure; the next attempt's message ends with it until that attempt trains.")
    image: str | None = Field(None, description="The head container's image, as the kubelet reports it.")
    image_id: str | None = Field(
        None, alias="imageID", description="The head container's image digest (containerStatuses[].imageID).")


class Metadata(BaseModel):
    """The part of ObjectMeta a manifest needs; the API server owns the rest."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    namespace: str | None = Field(None, max_length=63)


class CustomResource(StrictModel):
    """The envelope of every kuberl.io object; a subclass narrows `kind` and adds its spec and status."""

    api_version: Literal["kuberl.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: str
    metadata: Metadata

    @property
    def name(self) -> str:
        return self.metadata.name

    def to_manifest(self, *, exclude_unset: bool = False) -> dict[str, Any]:
        """The manifest form; apiVersion and kind always, though a Python-built object never sets them."""
        return {"apiVersion": self.api_version, "kind": self.kind,
                **super().to_manifest(exclude_unset=exclude_unset)}


class RLExperiment(CustomResource):
    kind: Literal["RLExperiment"] = KIND
    spec: RLExperimentSpec
    status: RLExperimentStatus | None = None
