"""The run record: what a run needs to be reproduced, written once per attempt to
`run-record/attempt-NNN.json` in the run's storage, and shown by `kuberl info RUN`.

It holds the resolved manifest (every default filled in, `spec.config` too), the versions of kuberl,
Python, torch, Ray, Gymnasium, ale-py and the env's own package, the trainer image (the operator
puts the name it built the head pod with into KUBERL_IMAGE; the digest the kubelet pulled is only in
the pod's status, so the operator copies it into the RLExperiment's `status.imageID`), the seeds of
every rollout worker, replay shard and evaluation, the machine (CPU model and flags, cores, GPUs) and how the
learner resolved `spec.learner.bf16` there.

`build_record` is pure; `probe_environment` reads this process's machine and packages.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import platform
import socket
import sys
import time
from typing import TYPE_CHECKING, Any, TypedDict

from kuberl.api.algorithms import REGISTRY
from kuberl.api.contract import ENV_IMAGE
from kuberl.api.yaml_text import dump_yaml
from kuberl.trainer.cpu import cpu_model, cpu_summary
from kuberl.trainer.machine import usable_cores
from kuberl.trainer.storage.errors import NotFound

if TYPE_CHECKING:
    from kuberl.api.types import RLExperiment
    from kuberl.trainer.learning.device import Bf16Record
    from kuberl.trainer.storage.base import ObjectStore

RECORDS = "run-record"
RECORD_FORMAT = 1
SHARD_SEED_STRIDE = 7919  # replay.shard.ReplayShard: shard i's buffer draws from seed + 7919 * (i + 1)


# -- the record's document ---------------------------------------------------------------------------
class EnvPackage(TypedDict):
    """The distribution that provides the env's module (None where it is a user's code on PYTHONPATH)."""

    module: str | None
    distribution: str | None
    version: str | None


# The distributions whose versions decide what a run computes, Python's, and the env's own.
Versions = TypedDict("Versions", {
    "kuberl": str | None, "torch": str | None, "ray": str | None, "gymnasium": str | None, "ale-py": str | None,
    "numpy": str | None, "python": str, "env": EnvPackage,
})


class Machine(TypedDict):
    hostname: str
    platform: str
    cpuModel: str | None  # noqa: N815 - the record's names
    cpuFlags: list[str]  # noqa: N815
    cpuBf16: bool  # noqa: N815
    cpuCount: int | None  # noqa: N815
    usableCores: int  # noqa: N815
    gpus: list[str]
    pythonExecutable: str  # noqa: N815


class LearnerRecord(TypedDict):
    bf16: Bf16Record | None  # spec.learner.bf16 as resolved for the learner's device


class _Found(TypedDict):
    versions: Versions
    machine: Machine


class Environment(_Found, total=False):
    """What the trainer found where it runs."""

    learner: LearnerRecord


class WorkerSeeds(TypedDict):
    index: int
    envSeed: int  # noqa: N815
    envs: int
    policySeed: int  # noqa: N815


class _Seed(TypedDict):
    seed: int | None
    learner: int | None


class Seeds(_Seed, total=False):
    note: str  # unseeded: why the run cannot repeat
    workers: list[WorkerSeeds]
    replayShards: list[int]  # noqa: N815
    evaluationEpisodes: list[int]  # noqa: N815 - the first and the last


class RunRecord(TypedDict):
    """`run-record/attempt-NNN.json`, key for key."""

    format: int
    experiment: str
    namespace: str | None
    attempt: int
    run: str
    startedAt: str  # noqa: N815
    image: str | None
    versions: Versions
    machine: Machine
    seeds: Seeds
    learner: LearnerRecord
    manifest: dict[str, Any]  # the manifest document, every default filled in


def record_key(attempt: int) -> str:
    return f"{RECORDS}/attempt-{attempt:03d}.json"


def resolved_manifest(experiment: RLExperiment) -> dict[str, Any]:
    """The manifest with every default filled in, spec.config's hyperparameters included."""
    from kuberl.api.field_errors import ManifestError
    from kuberl.api.validation import hyperparams_for

    manifest = experiment.to_manifest()
    manifest.pop("status", None)
    try:
        params = hyperparams_for(experiment)
    except ManifestError:  # validated before training; a spec this check cannot read keeps its own config
        return manifest
    manifest["spec"]["config"] = params.model_dump(by_alias=True, exclude_none=True, mode="json")
    return manifest


def seeds(seed: int | None, *, workers: int, envs_per_worker: int, shards: int, evaluation_episodes: int
          ) -> Seeds:
    """Every seed a run derives from spec.config.seed (None: each draws fresh entropy, the run cannot repeat)."""
    from kuberl.trainer.sampling.seeds import evaluation_seeds, worker_seeds

    indices = [0] if workers == 0 else list(range(1, workers + 1))  # 0: sampling in the learner's process
    table: Seeds = {"seed": seed, "learner": seed}
    if seed is None:
        table["note"] = "spec.config.seed is not set: envs, policies and replay draw fresh entropy"
        return table
    listed: list[WorkerSeeds] = []
    for index in indices:
        env_seed, policy_seed = worker_seeds(seed, index, envs_per_worker)
        assert env_seed is not None
        # The worker's vector env resets from envSeed: Gymnasium gives env j of a sync vector env envSeed + j,
        # and a natively vectorised env (CartPole's) draws all of its envs from envSeed.
        listed.append({"index": index, "envSeed": env_seed, "envs": envs_per_worker,
                                 "policySeed": policy_seed})
    table["workers"] = listed
    table["replayShards"] = [seed + SHARD_SEED_STRIDE * (i + 1) for i in range(shards)]
    episodes = evaluation_seeds(seed, evaluation_episodes)
    table["evaluationEpisodes"] = [episodes[0], episodes[-1]] if episodes else []
    return table


def build_record(experiment: RLExperiment, environment: Environment, *, attempt: int, run_uri: str,
                 image: str | None, started_at: float, namespace: str | None = None) -> RunRecord:
    """The record of one attempt (pure). `environment` is what the trainer found where it runs: versions, machine,
    and `learner`, spec.learner.bf16 as resolved for the learner's device (task_defaults.bf16_record)."""
    spec = experiment.spec
    manifest = resolved_manifest(experiment)
    entry = REGISTRY[spec.algorithm]
    on_shards = entry.placement(spec.rollouts.workers, spec.replay.shards) == "shards"
    shards = entry.shard_count(spec.rollouts.workers, spec.replay.shards) if on_shards else 0
    evaluation = spec.evaluation.episodes if spec.evaluation is not None else 0
    return {
        "format": RECORD_FORMAT,
        "experiment": experiment.name,
        "namespace": namespace or experiment.metadata.namespace,
        "attempt": attempt,
        "run": run_uri,
        "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at)),
        "image": image or None,  # its digest: the RLExperiment's status.imageID (only the kubelet knows it)
        "versions": environment["versions"],
        "machine": environment["machine"],
        "seeds": seeds(manifest["spec"]["config"].get("seed"), workers=spec.rollouts.workers,
                       envs_per_worker=spec.rollouts.envs_per_worker, shards=shards, evaluation_episodes=evaluation),
        "learner": environment.get("learner", LearnerRecord(bf16=None)),
        "manifest": manifest,
    }


# -- probing this process's machine -------------------------------------------------------------------
__all__ = ["cpu_model"]  # kuberl.trainer.cpu's, where it is kept with the CPU's flags


def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def env_module(env_id: str) -> str | None:
    """The module that defines the env `spec.env.id` names (its entry point's, for a Gymnasium id)."""
    from kuberl.trainer.sampling.env_ids import parse_env_id

    parsed = parse_env_id(env_id)
    if parsed.kind == "class":
        return parsed.module
    import gymnasium as gym

    if parsed.module:
        importlib.import_module(parsed.module)
    entry = gym.spec(parsed.name).entry_point
    return entry.split(":", 1)[0] if isinstance(entry, str) else getattr(entry, "__module__", None)


def env_package(env_id: str) -> EnvPackage:
    """The distribution (and version) that provides the env's module; the module alone when none does (a user's
    code on PYTHONPATH)."""
    try:
        module = env_module(env_id)
    except Exception:  # the env checks ran before; whatever fails here only leaves the package unknown
        module = None
    if module is None:
        return {"module": None, "distribution": None, "version": None}
    top = module.split(".", 1)[0]
    names = importlib.metadata.packages_distributions().get(top) or []
    distribution = names[0] if names else None
    return {"module": module, "distribution": distribution,
            "version": version_of(distribution) if distribution else None}


def gpus() -> list[str]:
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def probe_environment(env_id: str) -> Environment:
    """Versions and machine of this process."""
    cpu = cpu_summary()
    versions: Versions = {
        "kuberl": version_of("kuberl"), "torch": version_of("torch"), "ray": version_of("ray"),
        "gymnasium": version_of("gymnasium"), "ale-py": version_of("ale-py"), "numpy": version_of("numpy"),
        "python": platform.python_version(), "env": env_package(env_id),
    }
    return {
        "versions": versions,
        "machine": {"hostname": socket.gethostname(), "platform": platform.platform(),
                    "cpuModel": cpu["cpu_model"], "cpuFlags": cpu["cpu_flags"], "cpuBf16": cpu["cpu_bf16"],
                    "cpuCount": os.cpu_count(),
                    "usableCores": usable_cores(), "gpus": gpus(), "pythonExecutable": sys.executable},
    }


# -- the store -------------------------------------------------------------------------------------------
def write_record(store: ObjectStore, experiment: RLExperiment, *, attempt: int, namespace: str | None = None,
                 learner_bf16: Bf16Record | None = None) -> RunRecord:
    environment: Environment = {**probe_environment(experiment.spec.env.id), "learner": {"bf16": learner_bf16}}
    record = build_record(experiment, environment, attempt=attempt, run_uri=store.uri,
                          image=os.environ.get(ENV_IMAGE) or None, started_at=time.time(), namespace=namespace)
    store.put_bytes(record_key(attempt), json.dumps(record, indent=1).encode())
    return record


def read_records(store: ObjectStore) -> list[RunRecord]:
    """Every attempt's record, oldest first (unreadable ones are skipped)."""
    found = []
    for key in store.list(f"{RECORDS}/"):
        if not key.endswith(".json"):
            continue
        try:
            found.append(json.loads(store.get_bytes(key)))
        except (NotFound, ValueError):
            continue
    return sorted(found, key=lambda r: int(r.get("attempt", 0)))


# -- `kuberl info` ----------------------------------------------------------------------------------------
def _version(versions: Versions, name: str) -> str:
    return f"{name} {versions.get(name) or '-'}"


def _seeds_text(table: Seeds) -> list[str]:
    if table.get("seed") is None:
        return [f"seed:       none ({table.get('note', 'unseeded')})"]
    lines = [f"seed:       {table['seed']} (learner: torch and numpy)"]
    for worker in table.get("workers", []):
        lines.append(f"  worker {worker['index']}: env seed {worker['envSeed']} ({worker['envs']} envs), "
                     f"policy seed {worker['policySeed']}")
    if table.get("replayShards"):
        lines.append(f"  replay shards: {', '.join(str(s) for s in table['replayShards'])}")
    if table.get("evaluationEpisodes"):
        first, last = table["evaluationEpisodes"]
        lines.append(f"  evaluation episodes: {first}..{last}")
    return lines


def _bf16_text(machine: Machine, bf16: Bf16Record | None) -> list[str]:
    flags = machine.get("cpuFlags")
    lines = [f"cpu flags:  {' '.join(flags) if flags else 'none of avx2, avx512f, avx512_bf16, amx_bf16'}"
             ] if flags is not None else []
    if bf16:
        lines.append(f"bf16:       {bf16.get('reason')} (learner.bf16 on {bf16.get('device')})")
    return lines


def record_text(record: RunRecord, *, attempts: int = 1) -> str:
    """A run record, readable (pure)."""
    versions, machine = record.get("versions") or {}, record.get("machine") or {}
    env = versions.get("env") or {}
    spec = (record.get("manifest") or {}).get("spec") or {}
    namespace = f" in namespace {record['namespace']}" if record.get("namespace") else ""
    image = record.get("image")
    digest = (f" (its digest: kubectl -n {record.get('namespace') or 'NS'} get rlx {record.get('experiment')} "
              "-o jsonpath='{.status.imageID}')") if image else ""
    package = (f"{env.get('distribution')} {env.get('version') or '-'}" if env.get("distribution")
               else "no installed distribution")
    gpus = machine.get("gpus") or []
    lines = [
        f"run:        {record.get('run')}",
        f"experiment: {record.get('experiment')}{namespace}, attempt {record.get('attempt')} "
        f"(records of {attempts} attempt(s)), started {record.get('startedAt')}",
        f"algorithm:  {spec.get('algorithm')} on {(spec.get('env') or {}).get('id')}",
        f"image:      {image or 'none (not run by the operator)'}{digest}",
        "versions:   " + ", ".join(_version(versions, n) for n in ("kuberl", "python", "torch", "ray", "gymnasium",
                                                                    "ale-py", "numpy")),
        f"env:        {env.get('module') or '-'} from {package}",
        f"machine:    {machine.get('cpuModel') or 'unknown CPU'}, {machine.get('cpuCount')} cores, GPUs: "
        f"{', '.join(gpus) if gpus else 'none'}; {machine.get('hostname')}, {machine.get('platform')}",
        *_bf16_text(machine, (record.get("learner") or {}).get("bf16")),
        *_seeds_text(record.get("seeds") or {}),
        "manifest (resolved, every default filled in):",
        *("  " + line for line in dump_yaml(record.get("manifest") or {}, sort_keys=False).splitlines()),
    ]
    return "\n".join(lines)
