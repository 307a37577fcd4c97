"""Every example manifest is a valid RLExperiment: for the generated CRD schema, for kuberl's own
validation (including the checks a cluster run adds), and with an env the trainer can build.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import jsonschema
import kubernetes_validate
import numpy as np
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

from kuberl.api.validation import cluster_errors, load_manifest
from kuberl.trainer.run.checks import env_errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MANIFESTS = sorted(EXAMPLES.glob("*.yaml"))
# Written to run on a cluster as they are (the lead's cartpole-ppo.yaml is the laptop demo).
CLUSTER_READY = ["cartpole-apex.yaml", "cartpole-appo.yaml", "pendulum-ppo.yaml", "pendulum-sac.yaml", "custom-env.yaml", "minio.yaml",
                 "pong-apex.yaml", "pong-appo.yaml", "pong-ppo.yaml", "pong-ppo-1gpu.yaml", "halfcheetah-ppo.yaml",
                 "cartpole-kueue.yaml", "cartpole-gang.yaml", "cartpole-template.yaml", "cartpole-ppo-cluster.yaml"]


@pytest.fixture(scope="module")
def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "rlexperiment.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


@pytest.fixture()
def user_envs_on_path(monkeypatch):
    """What the custom trainer image does with PYTHONPATH=/opt/kuberl/envs."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield
    for name in [m for m in sys.modules if m == "custom_env" or m.startswith("custom_env.")]:
        del sys.modules[name]


def test_the_examples_the_issue_asks_for_exist():
    assert {p.name for p in MANIFESTS} >= {"cartpole-ppo.yaml", *CLUSTER_READY}


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_example_passes_the_crd_schema(path, crd_schema):
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    jsonschema.Draft7Validator(crd_schema).validate(doc)


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_example_metadata_is_valid_kubernetes_object_metadata(path):
    doc = yaml.safe_load(path.read_text())
    # kubernetes-validate knows no custom kinds; ObjectMeta is the same for every kind.
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}
    kubernetes_validate.validate(probe, "1.35.0", strict=True)


@pytest.mark.parametrize("name", CLUSTER_READY)
def test_cluster_example_passes_kuberl_validation_for_a_cluster(name, user_envs_on_path):
    experiment = load_manifest((EXAMPLES / name).read_text(), source=name)
    assert cluster_errors(experiment) == []
    assert env_errors(experiment) == []
    assert experiment.spec.storage.uri.startswith("s3://")
    assert experiment.spec.storage.secret_ref is not None


def test_apex_example_trains_on_a_gpu_that_a_pod_provides():
    spec = load_manifest((EXAMPLES / "cartpole-apex.yaml").read_text()).spec
    assert spec.algorithm == "apex-dqn" and spec.learner.gpus >= 1
    assert spec.head.gpus >= spec.learner.gpus
    assert any(t.key == "nvidia.com/gpu" for t in spec.head.tolerations)
    assert spec.image.endswith("-cuda")
    assert spec.replay.shards >= 1 and spec.replay.prioritized
    assert spec.workers.replicas >= 1 and spec.rollouts.workers >= 2


@pytest.mark.parametrize(("name", "algorithm"), [("pong-apex.yaml", "apex-dqn"), ("pong-appo.yaml", "appo")])
def test_pong_cluster_examples_have_a_gpu_learner_head_and_cpu_worker_pods(name, algorithm):
    spec = load_manifest((EXAMPLES / name).read_text()).spec
    assert spec.algorithm == algorithm and spec.env.id == "ALE/Pong-v5" and spec.env.preprocessing == "atari"
    assert spec.learner.gpus == 1 and spec.head.gpus == 1 and spec.image.endswith("-cuda")
    assert spec.workers.replicas >= 1 and spec.workers.gpus == 0 and spec.rollouts.workers >= spec.workers.replicas


def test_one_gpu_pong_example_samples_in_the_learners_process_on_every_core_without_sticky_actions():
    spec = load_manifest((EXAMPLES / "pong-ppo-1gpu.yaml").read_text()).spec
    assert spec.algorithm == "ppo" and spec.learner.gpus == 1 and spec.head.gpus == 1
    assert spec.rollouts.workers == 0 and spec.rollouts.env_threads is None  # the default: the machine's cores
    assert spec.env.config["repeat_action_probability"] == 0.0


def test_cpu_pong_example_trains_in_one_process_on_the_cpu_with_the_machines_cores():
    spec = load_manifest((EXAMPLES / "pong-ppo-cpu.yaml").read_text()).spec
    assert spec.algorithm == "ppo" and spec.learner.gpus == 0 and spec.rollouts.workers == 0
    assert spec.learner.bf16 == "auto" and spec.learner.threads == 2  # auto: float32 on every CPU
    assert spec.stop.episode_return_mean == 18 and spec.stop.time_seconds == 7200
    # four times CleanRL's gradient steps per env step, the rate annealed over a 2M-step budget (docs/benchmarks.md,
    # Pong to 18 on 2 cores)
    assert spec.config["minibatchSize"] == 64 and spec.config.get("numEpochs") is None
    assert spec.stop.timesteps == 2_000_000 and spec.config.get("annealTimesteps") is None


def test_no_example_sets_bf16_they_rely_on_auto():
    # true would emulate bfloat16 on a CPU without it (about 11x slower per minibatch on an AVX2 CPU)
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            spec = (document or {}).get("spec") or {}
            learners = [spec.get("learner"), ((spec.get("template") or {}).get("spec") or {}).get("learner")]
            assert all("bf16" not in (learner or {}) for learner in learners), path.name


# The sticky actions of each Pong example: what the published settings it follows use (CleanRL's ppo_atari and
# RLlib's pong_appo.py: none), else ALE v5's own default, stated.
PONG_STICKY_ACTIONS = {"pong-ppo.yaml": 0.0, "pong-appo.yaml": 0.0, "pong-ppo-1gpu.yaml": 0.0, "pong-ppo-cpu.yaml": 0.0,
                       "pong-apex.yaml": 0.25}


def test_every_pong_example_states_its_sticky_actions():
    assert set(PONG_STICKY_ACTIONS) == {p.name for p in EXAMPLES.glob("pong-*.yaml")}
    for name, sticky in PONG_STICKY_ACTIONS.items():
        text = (EXAMPLES / name).read_text()
        assert load_manifest(text).spec.env.config.get("repeat_action_probability") == sticky, name
        assert "sticky" in text.lower(), f"{name}: say why in a comment"


@pytest.mark.parametrize(("name", "observation_shape"), [("pong-apex.yaml", (4, 84, 84)),
                                                         ("pong-appo.yaml", (4, 84, 84)),
                                                         ("pong-ppo.yaml", (4, 84, 84)),
                                                         ("pong-ppo-1gpu.yaml", (4, 84, 84)),
                                                         ("pong-ppo-cpu.yaml", (4, 84, 84)),
                                                         ("halfcheetah-ppo.yaml", (17,))])
def test_pixel_and_mujoco_examples_build_their_envs(name, observation_shape):
    from kuberl.trainer.sampling.envs import EnvSettings, env_spaces

    spec = load_manifest((EXAMPLES / name).read_text()).spec
    assert env_spaces(EnvSettings.from_spec(spec.env)).observation_space.shape == observation_shape


def test_pendulum_example_is_continuous_ppo():
    experiment = load_manifest((EXAMPLES / "pendulum-ppo.yaml").read_text())
    assert experiment.spec.algorithm == "ppo"
    env = gym.make(experiment.spec.env.id, **experiment.spec.env.config)
    assert isinstance(env.action_space, gym.spaces.Box)
    env.close()


def test_pendulum_sac_example_is_sac_on_a_bounded_box_with_rollout_workers():
    spec = load_manifest((EXAMPLES / "pendulum-sac.yaml").read_text()).spec
    assert spec.algorithm == "sac" and spec.rollouts.workers == 2 and spec.replay.prioritized
    env = gym.make(spec.env.id, **spec.env.config)
    assert isinstance(env.action_space, gym.spaces.Box) and np.isfinite(env.action_space.high).all()
    env.close()


def test_minio_example_points_at_an_s3_compatible_endpoint():
    storage = load_manifest((EXAMPLES / "minio.yaml").read_text()).spec.storage
    assert storage.endpoint.startswith("http://minio.")
    assert storage.secret_ref.name == "minio-credentials"


def test_custom_env_is_refused_where_its_module_is_missing():
    experiment = load_manifest((EXAMPLES / "custom-env.yaml").read_text())
    (error,) = env_errors(experiment)
    assert error.path == "spec.env.id" and "custom_env" in error.message


def test_custom_env_passes_gymnasiums_checker_and_is_solvable(user_envs_on_path):
    experiment = load_manifest((EXAMPLES / "custom-env.yaml").read_text())
    module_name, _, class_name = experiment.spec.env.id.partition(":")
    env_class = getattr(__import__(module_name, fromlist=[class_name]), class_name)
    env = env_class(**experiment.spec.env.config)
    check_env(env, skip_render_check=True)

    def episode_return(policy) -> tuple[float, bool]:
        obs, _ = env.reset(seed=11)
        total, done, reached = 0.0, False, False
        while not done:
            obs, reward, reached, truncated, _ = env.step(policy(obs))
            total += reward
            done = reached or truncated
        assert env.observation_space.contains(obs)
        return total, reached

    right, reached_right = episode_return(lambda obs: 1)
    left, reached_left = episode_return(lambda obs: 0)
    assert reached_right and right > experiment.spec.stop.episode_return_mean
    assert not reached_left and left < 0


def test_custom_env_rejects_bad_config_and_actions(user_envs_on_path):
    from custom_env.corridor import CorridorEnv

    with pytest.raises(ValueError, match="length"):
        CorridorEnv(length=1)
    env = CorridorEnv(length=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(np.int64(2))


def test_the_evaluated_example_evaluates_films_and_keeps_the_best():
    spec = load_manifest((EXAMPLES / "cartpole-ppo-evaluated.yaml").read_text()).spec
    assert spec.evaluation.workers >= 1 and not spec.evaluation.explore and spec.evaluation.video is not None
    assert spec.checkpoint.keep_best and spec.stop.evaluation_return_mean == 500


def test_platform_examples_build_kueue_gang_and_template_pods():
    from kuberl.api.contract import DEFAULT_STATUS_PORT
    from kuberl.operator.builders import Owner, build_head_pod, build_worker_pod, resolve_experiment
    from kuberl.operator.builders.podgroup import build_pod_group, place_pod, placement_of
    from kuberl.operator.settings import Settings
    from kuberl_testing.schemas import validate_strict

    owner = Owner("x", "research", "uid")
    for name in ("cartpole-kueue.yaml", "cartpole-gang.yaml", "cartpole-template.yaml"):
        doc = yaml.safe_load((EXAMPLES / name).read_text())
        experiment = resolve_experiment(load_manifest((EXAMPLES / name).read_text()), Settings(), "research")
        placement = placement_of(doc["metadata"].get("labels"), experiment)
        total = 1 + experiment.spec.workers.replicas
        built = [build_head_pod(experiment, owner, 1, status_port=DEFAULT_STATUS_PORT),
                 build_worker_pod(experiment, owner, 0, 1, status_port=DEFAULT_STATUS_PORT)]
        pods = [place_pod(pod, placement, owner, attempt=1, total=total) for pod in built]
        for pod in pods:
            validate_strict(pod)
        group = build_pod_group(experiment, owner, placement, pods[0], pods[1])
        if name == "cartpole-gang.yaml":
            validate_strict(group)
            assert group["spec"]["minMember"] == 5
        else:
            assert group is None
        if name == "cartpole-kueue.yaml":
            assert pods[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
        if name == "cartpole-template.yaml":
            assert all(p["spec"]["imagePullSecrets"] == [{"name": "registry-creds"}] for p in pods)


def _default_for(experiment, kind: str, path: str) -> Any:
    """What `path` (a manifest path under spec) would be where the manifest left it unset: the task kind's set,
    else the model's own default."""
    from pydantic.alias_generators import to_snake

    from kuberl.api.algorithms import REGISTRY
    from kuberl.api.defaults import DEFAULTS
    from kuberl.api.types import ReplaySpec, RolloutsSpec

    chosen = DEFAULTS[experiment.spec.algorithm].get(kind)
    values = chosen.plain() if chosen is not None else {}
    if path in values:
        return values[path]
    section, field = path.split(".")
    model = {"config": REGISTRY[experiment.spec.algorithm].hyperparams, "rollouts": RolloutsSpec,
             "replay": ReplaySpec}[section]
    value = model.model_fields[to_snake(field)].get_default(call_default_factory=True)
    return value.model_dump(by_alias=True) if hasattr(value, "model_dump") else value


def _explained(text: str, path: str) -> bool:
    """The manifest's line for `path` (`config.lr`: `lr:` under `spec.config`) has a comment, or is one of a run of
    the section's keys under a comment line, or its section's line has one."""
    section, field = path.split(".")
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith(f"  {section}:"))
    at = next(i for i in range(header + 1, len(lines)) if lines[i].startswith(f"    {field}:"))
    if "#" in lines[at]:
        return True
    for line in reversed(lines[header + 1:at]):
        if line.strip().startswith("#"):
            return True
        if not line.strip():
            break
    return "#" in lines[header]


def _example_experiments() -> list[Any]:
    """Each example that holds an RLExperiment, as (name, text), with its name as the case id."""
    cases = []
    for path in MANIFESTS:
        text = path.read_text()
        if any(doc and doc.get("kind") == "RLExperiment" for doc in yaml.safe_load_all(text)):
            cases.append(pytest.param(path.name, text, id=path.name))
    return cases


@pytest.mark.parametrize(("name", "text"), _example_experiments())
def test_an_example_sets_only_what_differs_from_its_defaults_and_says_why(name, text, user_envs_on_path):
    from kuberl.api.defaults import user_set_paths
    from kuberl.trainer.run.task_defaults import detect_task_kind

    experiment = load_manifest(text)
    kind = detect_task_kind(experiment)
    assert kind is not None, f"{name}: no task kind (its env did not build)"
    raw = yaml.safe_load(text)["spec"]
    for path in sorted(user_set_paths(experiment) - {"config.seed"}):
        section, field = path.split(".")
        value = raw[section][field]
        assert value != _default_for(experiment, kind, path), f"{name}: {path}: {value!r} is the default already"
        assert _explained(text, path), f"{name}: {path} has no comment saying why"
