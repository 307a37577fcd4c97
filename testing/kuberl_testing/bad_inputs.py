"""The bad-input matrix: one table of broken RLExperiment manifests, each with who must refuse it.

Every case changes one field of a small valid manifest and says which layer refuses it:
`schema=True` when the CRD's openAPIV3Schema (or the JSON the API server speaks) already refuses it;
otherwise only code can (cross-field rules, hyperparameters under `spec.config`, env checks), and the
case must pass the schema. `catcher` says which code: the manifest validator shared by the operator and
`kuberl train` (MANIFEST), the checks a cluster run adds (CLUSTER: `kuberl validate --cluster` and the
operator), or the trainer's env checks (ENV: `kuberl validate`/`train` and the trainer pod, never the
operator, which does not import envs). `names` is the field path the error must name.

tests/unit/test_bad_input_matrix.py runs every case against the schema, `kuberl validate` and the
operator's validation; tests/integration/test_operator_bad_input.py applies one case of each class
through the real operator.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any

from kuberl.api.algorithms import HYPERPARAMS, REGISTRY
from kuberl.api.types import API_VERSION, KIND

WRONG_TYPE = "wrong-type"
MALFORMED = "malformed"  # the right type, but not the pattern (a quantity, a URI, a DNS name)
OUT_OF_RANGE = "out-of-range"
UNKNOWN_ENUM = "unknown-enum"
MISSING_REQUIRED = "missing-required"
UNKNOWN_FIELD = "unknown-field"
INCONSISTENT = "inconsistent"
HOSTILE = "hostile"  # huge numbers, inf/nan, 900 KB strings, unicode, deep nesting
CLASSES = (WRONG_TYPE, MALFORMED, OUT_OF_RANGE, UNKNOWN_ENUM, MISSING_REQUIRED, UNKNOWN_FIELD, INCONSISTENT, HOSTILE)

MANIFEST, CLUSTER, ENV = "manifest", "cluster", "env"


class _Delete:
    def __repr__(self) -> str:
        return "<deleted>"


DELETE = _Delete()
BIG_STRING = "x" * 900_000  # a 900 KB value: the manifest stays under the 1 MB limit, so the field is named


def nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    root = node
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return root


def _env_for(algorithm: str) -> str:
    """CartPole-v1 for an algorithm with discrete actions, Pendulum-v1 for one with continuous actions only."""
    return "CartPole-v1" if "Discrete" in REGISTRY[algorithm].action_spaces else "Pendulum-v1"


def base_manifest(name: str = "bad-input", algorithm: str = "ppo") -> dict[str, Any]:
    """A small valid manifest that also passes the cluster checks."""
    spec = {"algorithm": algorithm, "env": {"id": _env_for(algorithm)}, "stop": {"timesteps": 1000},
            "storage": {"uri": "s3://bucket/runs"}, "workers": {"replicas": 0}}
    if REGISTRY[algorithm].replay == "shards":  # it samples only on rollout workers
        spec["rollouts"] = {"workers": 1}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def _parts(path: str) -> list[str | int]:
    return [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", path)]


def _algorithm_for(path: str) -> str:
    """The first algorithm whose hyperparameters include a `config.X` field."""
    key = path.split(".")[1]
    for algorithm, params in HYPERPARAMS.items():
        if key in {f.alias or n for n, f in params.model_fields.items()}:
            return algorithm
    return "ppo"


@dataclass(frozen=True)
class BadInput:
    path: str  # spec-relative ("rollouts.workers", "head.tolerations[0].key"), or "metadata.name"
    value: Any  # DELETE removes the field
    kind: str
    schema: bool  # the CRD schema refuses it (else it must pass the schema)
    catcher: str = MANIFEST
    names: str = ""  # the field the error names; default: the path
    base: dict[str, Any] = field(default_factory=dict)  # spec fields set first (the combination's context)
    note: str = ""

    @property
    def field_path(self) -> str:
        """The error's field path ("spec.rollouts.workers")."""
        if self.names:
            return self.names
        path = self.path if self.path.startswith("metadata.") else f"spec.{self.path}"
        return path

    @property
    def leaf(self) -> str:
        """The schema leaf the case exercises, indices folded ("head.tolerations[].key")."""
        return re.sub(r"\[\d+\]", "[]", self.path)

    @property
    def id(self) -> str:
        value = "deleted" if self.value is DELETE else re.sub(r"\W+", "_", repr(self.value)[:12]).strip("_")
        return f"{self.kind}-{self.path}-{value}"

    def manifest(self, name: str = "bad-input") -> dict[str, Any]:
        algorithm = self.base.get("algorithm") or (_algorithm_for(self.path) if self.path.startswith("config.")
                                                   else "ppo")
        doc = base_manifest(name, algorithm)
        doc["spec"].update(copy.deepcopy(self.base))
        parts = _parts(self.path)
        node: Any = doc if parts[0] == "metadata" else doc["spec"]
        for part, following in zip(parts[:-1], parts[1:], strict=True):
            empty: Any = [] if isinstance(following, int) else {}
            if isinstance(part, int):
                while len(node) <= part:
                    node.append(copy.deepcopy(empty))
                node = node[part]
            else:
                node = node.setdefault(part, empty)
        last = parts[-1]
        if self.value is DELETE:
            node.pop(last, None)
        elif isinstance(last, int):
            while len(node) <= last:
                node.append(None)
            node[last] = copy.deepcopy(self.value)
        else:
            node[last] = copy.deepcopy(self.value)
        return doc


C = BadInput
_EVALUATION = {"evaluation": {"interval": 5}}  # a valid spec.evaluation the case changes one field of
_MLFLOW = {"tracking": {"mlflow": {"uri": "http://mlflow.mlflow:5000"}}}  # a valid spec.tracking.mlflow
_WANDB = {"tracking": {"wandb": {"project": "kuberl", "apiKeySecretRef": {"name": "wandb-key"}}}}
# A valid multi-agent spec: a policy for each of simple_speaker_listener's agents (their spaces differ).
_MULTI = {"env": {"id": "mpe2:simple_speaker_listener_v4"}, "multiAgent": {"policies": [
    {"name": "speaker", "agents": ["speaker_0"]}, {"name": "listener", "agents": ["listener_*"]}]}}
_POD = [  # head and workers share the pod fields
    (MALFORMED, "cpu", "two", True),
    (WRONG_TYPE, "cpu", True, True),
    (MALFORMED, "memory", "4GB", True),
    (OUT_OF_RANGE, "memory", -1, False),  # int-or-string: the schema's pattern only binds strings
    (OUT_OF_RANGE, "gpus", 17, True),
    (WRONG_TYPE, "nodeSelector", {"pool": 3}, True),
    (MALFORMED, "nodeSelector", {"pool": "gpu nodes"}, True),  # not a label value: the pod would be refused
    (MALFORMED, "nodeSelector", {"bad key!": "x"}, False),  # map keys: beyond a structural schema
    (MALFORMED, "tolerations[0].key", "bad key", True),
    (WRONG_TYPE, "tolerations", "all", True),
    (OUT_OF_RANGE, "tolerations[0].key", "k" * 318, True),
    (UNKNOWN_ENUM, "tolerations[0].operator", "In", True),
    (OUT_OF_RANGE, "tolerations[0].value", "v" * 64, True),
    (UNKNOWN_ENUM, "tolerations[0].effect", "NoRun", True),
    (OUT_OF_RANGE, "tolerations[0].tolerationSeconds", -1, True),
    (UNKNOWN_FIELD, "tolerations[0].tolerationSecond", 5, True),
]

_INIT = {"name": "fetch", "image": "busybox:1.37"}
_TEMPLATE = [  # spec.<pod>.template: the upstream schema's fields stand for themselves; these are the refusals
    (WRONG_TYPE, "template", "pod", True, "", None),
    (UNKNOWN_FIELD, "template.spec.hostNetwork", True, True, "", None),
    (UNKNOWN_FIELD, "template.spec.containers[0].image", "evil:latest", True, "", None),
    (UNKNOWN_FIELD, "template.spec.containers[0].command", ["sh"], True, "", None),
    (UNKNOWN_FIELD, "template.spec.volumes[0].hostPath", {"path": "/"}, True, "", None),
    (WRONG_TYPE, "template.spec.containers[0].env", "FOO=1", True, "", None),
    (OUT_OF_RANGE, "template.spec.initContainers[0].securityContext.privileged", True, True, "", _INIT),
    (OUT_OF_RANGE, "template.spec.initContainers[0].securityContext.runAsUser", 0, True, "", _INIT),
    (INCONSISTENT, "template.spec.containers[0].env[0]", {"name": "RAY_ADDRESS", "value": "x"}, False, ".name", None),
    (INCONSISTENT, "template.spec.containers[0].resources.limits", {"cpu": "3"}, False, ".cpu", None),
    (INCONSISTENT, "template.spec.volumes[0]", {"name": "tmp", "emptyDir": {}}, False, ".name", None),
    (MALFORMED, "template.metadata.labels", {"kuberl.io/role": "x"}, False, ".kuberl.io/role", None),
]


def _template_case(pod: str, kind: str, path: str, value: Any, schema: bool, suffix: str,
                   init: dict[str, Any] | None) -> BadInput:
    base = {pod: {"template": {"spec": {"initContainers": [init]}}}} if init else {}
    return C(f"{pod}.{path}", value, kind, schema, names=f"spec.{pod}.{path}{suffix}" if suffix else "", base=base)


CASES: tuple[BadInput, ...] = (
    C("algorithm", DELETE, MISSING_REQUIRED, True),
    C("algorithm", "a3c", UNKNOWN_ENUM, True),
    C("algorithm", ["ppo"], WRONG_TYPE, True),
    C("env", DELETE, MISSING_REQUIRED, True),
    C("env.id", DELETE, MISSING_REQUIRED, True),
    C("env.id", "", OUT_OF_RANGE, True),
    C("env.id", "CartPoel-v1", UNKNOWN_ENUM, False, ENV, note="no such Gymnasium id"),
    C("env.id", "no_such_pkg.envs:Thing", UNKNOWN_ENUM, False, ENV, note="no such module"),
    C("env.id", "Pendulum-v1", INCONSISTENT, False, ENV, base={"algorithm": "dqn"}, names="spec.algorithm",
      note="continuous actions"),
    C("env.id", "CartPole-v1", INCONSISTENT, False, ENV, base={"algorithm": "sac"}, names="spec.algorithm",
      note="discrete actions"),
    C("env.id", BIG_STRING, HOSTILE, True),
    C("env.id", "Cärtpole-v1\u202e", HOSTILE, False, ENV, note="unicode, right-to-left override"),
    C("env.config", "render", WRONG_TYPE, True),
    C("env.config", {"gravity_typo": 1.0}, UNKNOWN_FIELD, False, ENV, names="spec.env.config"),
    C("env.config", nested(80), HOSTILE, False, note="80 levels of nesting"),
    C("env.preprocessing", "deepmind", UNKNOWN_ENUM, True),
    C("env.preprocessing", "atari", INCONSISTENT, False, ENV, note="atari preprocessing of a non-ALE env"),
    C("env.wrappers[0].name", "ClipAction", MALFORMED, True, note="not an import path"),
    C("env.wrappers[0].name", "gymnasium.wrappers.NoSuchWrapper", UNKNOWN_ENUM, False, ENV),
    C("env.wrappers[0].kwargs", "none", WRONG_TYPE, True, base={"env": {"id": "CartPole-v1", "wrappers": [
        {"name": "gymnasium.wrappers.TimeLimit"}]}}),
    C("env.wrappers[0].kwargs", {"max_steps": 5}, UNKNOWN_FIELD, False, ENV, base={"env": {
        "id": "CartPole-v1", "wrappers": [{"name": "gymnasium.wrappers.TimeLimit"}]}}, note="not the wrapper's keyword"),
    C("config", "fast", WRONG_TYPE, True),
    C("config.lrr", 0.1, UNKNOWN_FIELD, False),
    C("config.nStep", 3, INCONSISTENT, False, base={"algorithm": "ppo"}, note="a DQN parameter for PPO"),
    C("config.seed", -1, OUT_OF_RANGE, False),
    C("config.seed", 2**70, HOSTILE, False,
      note="beyond int64, in an open map: a real 1.20 API server stores it (as a float); code refuses it"),
    C("config.lr", 0, OUT_OF_RANGE, False),
    C("config.lr", math.nan, HOSTILE, True),
    C("config.gamma", 1.5, OUT_OF_RANGE, False),
    C("config.hidden", [], OUT_OF_RANGE, False),
    C("config.hidden", [64, 10**9], HOSTILE, False, names="spec.config.hidden[1]"),
    C("config.model", {"conv": [[32, 8]]}, OUT_OF_RANGE, False, names="spec.config.model.conv[0]"),
    C("config.activation", "gelu", UNKNOWN_ENUM, False),
    C("config.gradClip", 0, OUT_OF_RANGE, False),
    C("config.observationFilter", "zscore", UNKNOWN_ENUM, False),
    C("config.gaeLambda", 2, OUT_OF_RANGE, False),
    C("config.clipParam", -0.1, OUT_OF_RANGE, False),
    C("config.clipParam", math.inf, HOSTILE, True),
    C("config.vfClipParam", 0, OUT_OF_RANGE, False),
    C("config.vfCoeff", -1, OUT_OF_RANGE, False),
    C("config.entropyCoeff", "high", WRONG_TYPE, False),
    C("config.numEpochs", 0, OUT_OF_RANGE, False),
    C("config.minibatchSize", 100_000, INCONSISTENT, False, note="larger than the train batch"),
    C("config.normalizeAdvantages", "maybe", WRONG_TYPE, False),
    C("config.normalizeRewards", "sometimes", WRONG_TYPE, False),
    C("config.annealLr", "yes", WRONG_TYPE, False),
    C("config.annealTimesteps", 0, OUT_OF_RANGE, False),
    C("config.targetKl", 0, OUT_OF_RANGE, False),
    C("config.nStep", 0, OUT_OF_RANGE, False),
    C("config.doubleQ", 1, WRONG_TYPE, False),
    C("config.dueling", [], WRONG_TYPE, False),
    C("config.loss", "l1", UNKNOWN_ENUM, False),
    C("config.trainBatchSize", 0, OUT_OF_RANGE, False),
    C("config.learningStarts", -1, OUT_OF_RANGE, False),
    C("config.replayRatio", 0, OUT_OF_RANGE, False),
    C("config.targetUpdateInterval", 0, OUT_OF_RANGE, False),
    C("config.epsilonStart", 1.5, OUT_OF_RANGE, False),
    C("config.epsilonEnd", -0.1, OUT_OF_RANGE, False),
    C("config.epsilonTimesteps", 0, OUT_OF_RANGE, False),
    C("config.priorityAlpha", 2, OUT_OF_RANGE, False),
    C("config.priorityBeta", -1, OUT_OF_RANGE, False),
    C("config.priorityBetaTimesteps", 0, OUT_OF_RANGE, False),
    C("config.priorityBetaFinal", 1.5, OUT_OF_RANGE, False),
    C("config.priorityEps", 0, OUT_OF_RANGE, False),
    C("config.workerEpsilonBase", 0, OUT_OF_RANGE, False),
    C("config.workerEpsilonExponent", -1, OUT_OF_RANGE, False),
    C("config.weightSyncInterval", 0, OUT_OF_RANGE, False),
    C("config.prefetch", 65, OUT_OF_RANGE, False),
    C("config.maxReplayRatio", 0, OUT_OF_RANGE, False),
    C("config.minIterationSeconds", 3601, OUT_OF_RANGE, False),
    C("config.rhoBar", 0, OUT_OF_RANGE, False),
    C("config.cBar", -1, OUT_OF_RANGE, False),
    C("config.pgRhoBar", "high", WRONG_TYPE, False),
    C("config.bufferBatches", 0, OUT_OF_RANGE, False),
    C("config.batchReuse", 101, OUT_OF_RANGE, False),
    C("config.broadcastInterval", 0, OUT_OF_RANGE, False),
    C("config.learnerQueueSize", 0, OUT_OF_RANGE, False),
    C("config.requestsPerWorker", 17, OUT_OF_RANGE, False),
    C("config.targetWorkerClipping", 0, OUT_OF_RANGE, False),
    C("config.criticLr", 0, OUT_OF_RANGE, False),
    C("config.alphaLr", 2, OUT_OF_RANGE, False),
    C("config.tau", 0, OUT_OF_RANGE, False),
    C("config.initialAlpha", -1, OUT_OF_RANGE, False),
    C("config.targetEntropy", "auto", WRONG_TYPE, False),
    C("rollouts", [2], WRONG_TYPE, True),
    C("rollouts.workers", -1, OUT_OF_RANGE, True),
    C("rollouts.workers", "many", WRONG_TYPE, True),
    C("rollouts.workers", 10**30, HOSTILE, True),
    C("rollouts.workerz", 2, UNKNOWN_FIELD, True),
    C("rollouts", {"k" * 100_000: 1}, HOSTILE, True, names="spec.rollouts.kkkkkkkk", note="a 100 KB unknown key"),
    C("rollouts.envsPerWorker", 5000, OUT_OF_RANGE, True),
    C("rollouts.fragmentLength", 0, OUT_OF_RANGE, True),
    C("rollouts.fragmentLength", 1.5, WRONG_TYPE, True),
    C("rollouts.envThreads", 0, OUT_OF_RANGE, True),
    C("rollouts.envThreads", "many", WRONG_TYPE, True),
    C("rollouts.envGroups", 0, OUT_OF_RANGE, True),
    C("rollouts.envGroups", 3, INCONSISTENT, False, note="3 groups do not split the 8 envs per worker"),
    C("replay.shards", 257, OUT_OF_RANGE, True),
    C("replay.shards", 0, INCONSISTENT, False, base={"algorithm": "apex-dqn"}),
    C("replay.capacity", 0, OUT_OF_RANGE, True),
    C("replay.capacity", 1, INCONSISTENT, False, base={"algorithm": "dqn", "replay": {"shards": 2}}),
    C("replay.prioritized", "maybe", WRONG_TYPE, True),
    C("replay.prioritized", 1, WRONG_TYPE, True),
    C("learner.gpus", 0.5, WRONG_TYPE, True),
    C("learner.gpus", 17, OUT_OF_RANGE, True),
    C("learner.gpus", 2, OUT_OF_RANGE, True, note="the learner is not data-parallel"),
    C("learner.bf16", "yes", WRONG_TYPE, True),
    C("learner.threads", 0, OUT_OF_RANGE, True),
    C("learner.threads", "two", WRONG_TYPE, True),
    C("learner.gpus", 1, INCONSISTENT, False, CLUSTER, note="no pod has a GPU"),
    C("stop", {}, INCONSISTENT, False, note="no stop criterion"),
    C("stop.timesteps", 0, OUT_OF_RANGE, True),
    C("stop.timesteps", 10**30, HOSTILE, True),
    C("stop.timesteps", "1e6", WRONG_TYPE, True),
    C("stop.episodeReturnMean", "high", WRONG_TYPE, True),
    C("stop.episodeReturnMean", math.inf, HOSTILE, True),
    C("stop.episodeReturnMean", math.nan, HOSTILE, True),
    C("stop.timeSeconds", -5, OUT_OF_RANGE, True),
    C("stop.iterations", 0, OUT_OF_RANGE, True),
    C("checkpoint.everyIterations", 0, OUT_OF_RANGE, True),
    C("checkpoint.keep", 1001, OUT_OF_RANGE, True),
    C("checkpoint.keepBest", "yes", WRONG_TYPE, True),
    C("checkpoint.keepBest", True, INCONSISTENT, False, note="needs spec.evaluation"),
    C("checkpoint.export", ["pdf"], UNKNOWN_ENUM, True),
    C("checkpoint.export", "onnx", WRONG_TYPE, True),
    C("checkpoint.restoreFrom", "gs://bucket/runs/other", MALFORMED, True, note="s3:// or file:// only"),
    C("multiAgent.policies[0].name", "Speaker One", MALFORMED, True, base=_MULTI),
    C("multiAgent.policies[1].name", "speaker", INCONSISTENT, False, base=_MULTI, note="two policies of one name"),
    C("multiAgent.policies[0].agents", [], OUT_OF_RANGE, True, base=_MULTI),
    C("multiAgent.policies[1].agents", ["speaker_0"], INCONSISTENT, False, base=_MULTI,
      note="an agent named exactly by two policies"),
    C("multiAgent.policies[0].agents", ["*"], INCONSISTENT, False, ENV, base=_MULTI,
      note="the speaker's and the listener's spaces differ"),
    C("multiAgent.policies", [{"name": "speaker", "agents": ["speaker_0"]}], INCONSISTENT, False, ENV, base=_MULTI,
      note="listener_0 has no policy"),
    C("multiAgent.policies[0].config", {"lr": -1}, OUT_OF_RANGE, False, base=_MULTI,
      names="spec.multiAgent.policies[0].config.lr"),
    C("multiAgent.policies[0].model.activation", "gelu", UNKNOWN_ENUM, True, base=_MULTI),
    C("multiAgent.policies[0].model.conv", [[32, 8]], OUT_OF_RANGE, True, base=_MULTI),
    C("multiAgent.policies[0].model.convHidden", [0], OUT_OF_RANGE, True, base=_MULTI),
    C("multiAgent.policies[0].model.hidden", [], OUT_OF_RANGE, True, base=_MULTI),
    C("multiAgent.policiesToTrain", ["talker"], INCONSISTENT, False, base=_MULTI, note="no such policy"),
    C("multiAgent.agentIdFeature", "yes", WRONG_TYPE, True),
    C("tracking.mlflow.uri", "mlflow:5000", MALFORMED, True),
    C("tracking.mlflow.uri", DELETE, MISSING_REQUIRED, True, base=_MLFLOW),
    C("tracking.mlflow.experiment", "", OUT_OF_RANGE, True, base=_MLFLOW),
    C("tracking.wandb.project", DELETE, MISSING_REQUIRED, True, base=_WANDB),
    C("tracking.wandb.entity", "", OUT_OF_RANGE, True, base=_WANDB),
    C("tracking.wandb.group", "g" * 129, OUT_OF_RANGE, True, base=_WANDB),
    C("tracking.wandb.tags", "baseline", WRONG_TYPE, True, base=_WANDB),
    C("tracking.wandb.mode", "cloud", UNKNOWN_ENUM, True, base=_WANDB),
    C("tracking.wandb.apiKeySecretRef.name", "W&B_Key", MALFORMED, True, base=_WANDB),
    C("tracking.wandb.apiKeySecretRef.key", "api key", MALFORMED, True, base=_WANDB),
    C("stop.evaluationReturnMean", "high", WRONG_TYPE, True),
    C("stop.evaluationReturnMean", 100, INCONSISTENT, False, note="needs spec.evaluation"),
    C("evaluation", 10, WRONG_TYPE, True),
    C("evaluation.interval", DELETE, MISSING_REQUIRED, True, base=_EVALUATION),
    C("evaluation.interval", 0, OUT_OF_RANGE, True),
    C("evaluation.episodes", 0, OUT_OF_RANGE, True, base=_EVALUATION),
    C("evaluation.workers", -1, OUT_OF_RANGE, True, base=_EVALUATION),
    C("evaluation.explore", "no", WRONG_TYPE, True, base=_EVALUATION),
    C("evaluation.envConfig", [1], WRONG_TYPE, True, base=_EVALUATION),
    C("evaluation.video.everyEvaluations", 0, OUT_OF_RANGE, True, base=_EVALUATION),
    C("callbacks", "mypkg.callbacks", MALFORMED, True, note="no :Class"),
    C("callbacks", "no_such_pkg.hooks:Hooks", UNKNOWN_ENUM, False, ENV, note="no such module"),
    C("traces.enabled", "on?", WRONG_TYPE, True),
    C("traces.steps", [True], WRONG_TYPE, True),
    C("storage.uri", "gs://bucket/x", MALFORMED, True),
    C("storage.uri", "s3://b/" + BIG_STRING, HOSTILE, True),
    C("storage.uri", "file:///tmp/runs", INCONSISTENT, False, CLUSTER, note="lost with the pod"),
    C("storage.uri", DELETE, MISSING_REQUIRED, False, CLUSTER, note="required in a cluster"),
    C("storage.endpoint", "minio:9000", MALFORMED, True),
    C("storage.region", "r" * 65, OUT_OF_RANGE, True),
    C("storage.secretRef", {}, MISSING_REQUIRED, True, names="spec.storage.secretRef.name"),
    C("storage.secretRef.name", "S3_Creds", MALFORMED, True),
    C("storage.secretRef.key", "x", UNKNOWN_FIELD, True),
    C("image", 42, WRONG_TYPE, True),
    C("image", BIG_STRING, HOSTILE, True),
    C("image", "registry.example/trainer:1 --privileged", MALFORMED, True, note="whitespace in an image"),
    *(C(f"{pod}.{path}", value, kind, schema) for pod in ("head", "workers") for kind, path, value, schema in _POD),
    *(_template_case(pod, *case) for pod in ("head", "workers") for case in _TEMPLATE),
    C("scheduling.gang", "yes", WRONG_TYPE, True),
    C("scheduling.schedulerName", "yunikorn", UNKNOWN_ENUM, True),
    C("workers.replicas", 1001, OUT_OF_RANGE, True),
    C("workers.replicas", "three", WRONG_TYPE, True),
    C("backoffLimit", 101, OUT_OF_RANGE, True),
    C("suspend", "maybe", WRONG_TYPE, True),
    C("suspend", "true", WRONG_TYPE, True, note="a string, not a boolean"),
    C("ttlSecondsAfterFinished", -1, OUT_OF_RANGE, True),
    C("ttlSecondsAfterFinished", 2**40, HOSTILE, True, note="past int32; overflowed the operator's clock"),
    C("serviceAccountName", "Trainer SA", MALFORMED, True),
    C("priorityClassName", "p" * 254, OUT_OF_RANGE, True),
    C("bogus", 1, UNKNOWN_FIELD, True),
    C("metadata.name", "实验-1", HOSTILE, True, note="unicode name"),
    C("metadata.name", "Cart_Pole", MALFORMED, True),
)


def cases_of(kind: str) -> list[BadInput]:
    return [c for c in CASES if c.kind == kind]
