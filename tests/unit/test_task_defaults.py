"""Defaults by the kind of task (kuberl.api.defaults, kuberl.trainer.run.task_defaults): the right set for each
algorithm and kind, the manifest's values winning field by field, the printed line, and the machine's choices."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic.alias_generators import to_snake

from kuberl.api.algorithms import REGISTRY
from kuberl.api.defaults import (
    DEFAULTS,
    NOT_MEASURED,
    SOURCES,
    TASK_KINDS,
    RunBudget,
    applicable_kinds,
    defaults_line,
    resolved_defaults,
    user_set_paths,
    with_values,
)
from kuberl.api.types import ReplaySpec, RolloutsSpec
from kuberl.api.validation import hyperparams_for, validate_document
from kuberl.cli import main
from kuberl.trainer.run.task_defaults import (
    adaptive_replay_ratio,
    detect_task_kind,
    image_envs_for_cores,
    machine_values,
    resolve_task_defaults,
)

ENVS = {"discrete-vector": ("CartPole-v1", "none"), "continuous-vector": ("Pendulum-v1", "none"),
        "image": ("ALE/Pong-v5", "atari")}


def doc(algorithm: str, env: str = "CartPole-v1", preprocessing: str = "none", **spec: Any) -> dict[str, Any]:
    workers = 1 if REGISTRY[algorithm].replay == "shards" else 0
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "x"},
            "spec": {"algorithm": algorithm, "env": {"id": env, "preprocessing": preprocessing},
                     "rollouts": {"workers": workers}, "stop": {"timesteps": 1000}, **spec}}


def experiment(algorithm: str, env: str = "CartPole-v1", preprocessing: str = "none", **spec: Any):
    return validate_document(doc(algorithm, env, preprocessing, **spec))


PAIRS = [(a, k) for a in REGISTRY for k in applicable_kinds(a)]


def test_every_algorithm_of_the_registry_has_a_set_for_every_kind_it_can_act_in():
    assert set(DEFAULTS) == set(REGISTRY)
    for algorithm in REGISTRY:
        assert set(DEFAULTS[algorithm]) == set(applicable_kinds(algorithm)), algorithm
    assert applicable_kinds("dqn") == ("discrete-vector", "image")  # no Box actions in the registry
    assert applicable_kinds("sac") == ("continuous-vector", "image")
    assert applicable_kinds("ppo") == TASK_KINDS


@pytest.mark.parametrize(("algorithm", "kind"), PAIRS, ids=[f"{a}-{k}" for a, k in PAIRS])
def test_each_set_validates_and_names_its_sources(algorithm, kind):
    chosen = DEFAULTS[algorithm][kind]
    assert all(d.source in SOURCES for d in chosen.values.values())
    assert {path.split(".")[0] for path in chosen.values} <= {"config", "rollouts", "replay"}
    env, preprocessing = ENVS[kind]
    name, values = resolved_defaults(experiment(algorithm, env, preprocessing), kind)
    assert name.endswith(f"defaults for {algorithm}")
    budget = {path: 1000 for path, value in chosen.plain().items() if isinstance(value, RunBudget)}  # stop.timesteps
    assert values == {**chosen.plain(), **budget}  # a manifest that sets none of them gets the whole set
    resolved = with_values(experiment(algorithm, env, preprocessing), values)
    params = hyperparams_for(resolved)
    for path, value in values.items():
        section, field = path.split(".")
        holder = params if section == "config" else getattr(resolved.spec, section)
        assert getattr(holder, to_snake(field)) == value, path


# spec.replay is one model for every algorithm (capacity 100k); DQN's set keeps CleanRL's 10k buffer, which a
# Python builder user sets with `.replay(capacity=10_000)` (docs/manifest.md lists it).
SHARED_SPEC_FIELDS = {("dqn", "replay.capacity")}


@pytest.mark.parametrize("algorithm", [a for a in REGISTRY if "discrete-vector" in applicable_kinds(a)])
def test_the_discrete_vector_sets_are_the_models_own_defaults_that_learn_cartpole(algorithm):
    # The Python builder applies no set: it must train CartPole as a manifest without config does.
    params = REGISTRY[algorithm].hyperparams()
    for path, value in DEFAULTS[algorithm]["discrete-vector"].plain().items():
        if (algorithm, path) in SHARED_SPEC_FIELDS:
            continue
        section, field = path.split(".")
        holder = {"config": params, "rollouts": RolloutsSpec(), "replay": ReplaySpec()}[section]
        assert getattr(holder, to_snake(field)) == value, path


def test_the_sets_differ_where_the_published_settings_do():
    ppo = {kind: DEFAULTS["ppo"][kind].plain() for kind in TASK_KINDS}
    assert ppo["continuous-vector"]["config.observationFilter"] == "mean_std"
    assert ppo["continuous-vector"]["rollouts.fragmentLength"] * ppo["continuous-vector"]["rollouts.envsPerWorker"] \
        == 2048  # CleanRL's 2,048 steps per update
    assert ppo["continuous-vector"]["config.lr"] == 3e-4 and ppo["continuous-vector"]["config.annealLr"] is True
    # CleanRL's continuous-control script normalizes rewards; its discrete and Atari scripts do not.
    assert ppo["continuous-vector"]["config.normalizeRewards"] is True
    assert "config.normalizeRewards" not in ppo["discrete-vector"] and "config.normalizeRewards" not in ppo["image"]
    assert ppo["image"]["config.clipParam"] == 0.1 and ppo["image"]["config.lr"] == 2.5e-4
    assert ppo["discrete-vector"]["config.lr"] == 2e-3
    assert DEFAULTS["sac"]["continuous-vector"].plain()["replay.capacity"] == 1_000_000
    assert DEFAULTS["dqn"]["image"].plain()["config.learningStarts"] == 100_000
    dqn = {kind: DEFAULTS["dqn"][kind].plain() for kind in ("discrete-vector", "image")}
    assert dqn["discrete-vector"]["config.loss"] == "mse" and dqn["image"]["config.loss"] == "huber"
    assert dqn["discrete-vector"]["replay.capacity"] == 10_000 and dqn["discrete-vector"]["config.priorityAlpha"] == 0
    assert dqn["image"]["config.dueling"] is True and dqn["image"]["config.priorityAlpha"] == 0.6
    assert DEFAULTS["apex-dqn"]["image"].plain()["config.nStep"] == 3
    # APPO on vector tasks has no entropy bonus (RLlib's cartpole_appo.py): with one, CartPole at its cap drifted
    # back to uniform play. Images keep RLlib's Pong value; IMPALA keeps its bonus.
    assert DEFAULTS["appo"]["discrete-vector"].values["config.entropyCoeff"].source == "rllib-appo-cartpole"
    assert DEFAULTS["appo"]["image"].plain()["config.entropyCoeff"] == 0.01
    assert DEFAULTS["impala"]["discrete-vector"].plain()["config.entropyCoeff"] == 0.01


def test_the_manifests_values_win_field_by_field():
    exp = experiment("ppo", "Pendulum-v1", config={"lr": 0.001, "entropyCoeff": 0.02},
                     rollouts={"workers": 0, "fragmentLength": 100})
    assert user_set_paths(exp) == {"config.lr", "config.entropyCoeff", "rollouts.workers", "rollouts.fragmentLength"}
    name, values = resolved_defaults(exp, "continuous-vector")
    assert name == "continuous-control defaults for ppo"
    assert "config.lr" not in values and "config.entropyCoeff" not in values
    assert "rollouts.fragmentLength" not in values
    assert values["rollouts.envsPerWorker"] == 8 and values["config.numEpochs"] == 10
    resolved = with_values(exp, values)
    params = hyperparams_for(resolved)
    assert params.lr == 0.001 and params.entropy_coeff == 0.02 and params.num_epochs == 10
    assert resolved.spec.rollouts.fragment_length == 100 and resolved.spec.rollouts.envs_per_worker == 8


@pytest.mark.parametrize("kind", ["discrete-vector", "continuous-vector"])
def test_a_set_anneals_over_the_step_budget_and_leaves_the_rate_alone_without_one(kind):
    env = ENVS[kind][0]
    _, values = resolved_defaults(experiment("ppo", env), kind)
    assert values["config.annealLr"] is True and DEFAULTS["ppo"][kind].values["config.annealLr"].source in SOURCES
    _, values = resolved_defaults(experiment("ppo", env, stop={"iterations": 10}), kind)
    assert "config.annealLr" not in values  # nothing to anneal over, and no warning for a value never set


def test_a_default_minibatch_never_exceeds_the_manifests_smaller_train_batch():
    exp = experiment("ppo", "Pendulum-v1", rollouts={"workers": 0, "envsPerWorker": 2, "fragmentLength": 16})
    _, values = resolved_defaults(exp, "continuous-vector")
    assert values["config.minibatchSize"] == 32
    with_values(exp, values)  # minibatchSize <= envs x fragment holds: no error on a field the user never set


def test_the_line_lists_only_what_the_defaults_set():
    assert defaults_line("continuous-control defaults for ppo", {"config.lr": 3e-4, "config.annealLr": True,
                                                                 "rollouts.fragmentLength": 256}) == (
        "using the continuous-control defaults for ppo: lr=0.0003, annealLr=true, rollouts.fragmentLength=256")
    assert "nothing to add" in defaults_line("image defaults for dqn", {})


@pytest.mark.parametrize(("env", "preprocessing", "kind"), [
    ("CartPole-v1", "none", "discrete-vector"), ("Acrobot-v1", "none", "discrete-vector"),
    ("Pendulum-v1", "none", "continuous-vector"), ("ALE/Pong-v5", "atari", "image"),
])
def test_the_kind_comes_from_the_envs_spaces(env, preprocessing, kind):
    assert detect_task_kind(experiment("ppo", env, preprocessing)) == kind


def write(tmp_path, document: dict[str, Any]) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_validate_prints_the_line_with_what_the_manifest_left_unset(tmp_path, capsys):
    path = write(tmp_path, doc("ppo", "Pendulum-v1", config={"numEpochs": 5}))
    assert main(["validate", "-f", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("using the continuous-control defaults for ppo: lr=0.0003, annealLr=true,")
    assert "numEpochs" not in out[1] and "observationFilter=mean_std" in out[1]
    assert "rollouts.fragmentLength=256" in out[1]


def test_validate_without_the_env_says_who_decides(tmp_path, capsys):
    assert main(["validate", "-f", write(tmp_path, doc("ppo", "Pendulum-v1")), "--skip-env-checks"]) == 0
    assert "chosen by the trainer when it starts" in capsys.readouterr().out
    # env.preprocessing: atari makes images without building anything
    assert main(["validate", "-f", write(tmp_path, doc("dqn", "ALE/Pong-v5", "atari")), "--skip-env-checks"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("using the image defaults for dqn: lr=0.0001, trainBatchSize=32, learningStarts=100000")


def test_images_in_process_get_an_env_a_core():
    assert image_envs_for_cores(8, 16) == 16
    assert image_envs_for_cores(8, 2) == 8  # never fewer than published
    assert image_envs_for_cores(8, 500) == 64


def _image_ppo(cores: int) -> tuple[dict[str, Any], dict[str, Any], int, int]:
    """What the image set and a machine of `cores` give PPO on Pong: (values, record, fragment, minibatch)."""
    resolved, defaults = resolve_task_defaults(experiment("ppo", "ALE/Pong-v5", "atari"), measure=False, cores=cores)
    assert defaults is not None and defaults.kind == "image"
    params = hyperparams_for(resolved)
    assert resolved.spec.rollouts.envs_per_worker * resolved.spec.rollouts.fragment_length == \
        defaults.machine["trainBatch"]
    return defaults.values, defaults.machine, resolved.spec.rollouts.fragment_length, params.minibatch_size


@pytest.mark.parametrize(("cores", "envs", "minibatches"), [(2, 8, 4), (8, 8, 4), (64, 64, 32)])
def test_image_ppo_keeps_its_128_step_horizon_on_any_machine_and_its_batch_grows_with_the_envs(cores, envs,
                                                                                                minibatches):
    # CleanRL's and RL Zoo's 128-step fragments are PPO's GAE horizon: more cores bring more envs, not shorter
    # fragments; the minibatch keeps CleanRL's 256 rows, so there are more of them.
    values, record, fragment, minibatch = _image_ppo(cores)
    assert fragment == 128 and minibatch == 256
    assert values["rollouts.envsPerWorker"] == envs and "rollouts.fragmentLength" in values  # the set's 128
    assert record["trainBatch"] == envs * 128 and record["minibatches"] == minibatches


def test_machine_values_leave_the_manifests_envs_and_vector_tasks_alone():
    pong = with_values(experiment("ppo", "ALE/Pong-v5", "atari"), {"rollouts.envsPerWorker": 8,
                                                                   "rollouts.fragmentLength": 128})
    values, record = machine_values(pong, "image", set(), cores=16, measure=False)
    assert values == {"rollouts.envsPerWorker": 16} and record["cores"] == 16 and record["trainBatch"] == 2048
    values, _ = machine_values(pong, "image", {"rollouts.envsPerWorker"}, cores=16, measure=False)
    assert values == {}
    values, _ = machine_values(experiment("ppo", "Pendulum-v1"), "continuous-vector", set(), cores=16, measure=False)
    assert values == {}


def test_apex_replay_ratio_follows_the_learner_between_its_bounds():
    # images: 1 sample per env step when the learner keeps up, down to 0.25
    assert adaptive_replay_ratio("image", 512, learner_samples_per_s=50_000, sampler_steps_per_s=4_000) == 1 / 512
    assert adaptive_replay_ratio("image", 512, learner_samples_per_s=2_000, sampler_steps_per_s=4_000) == 0.5 / 512
    assert adaptive_replay_ratio("image", 512, learner_samples_per_s=200, sampler_steps_per_s=4_000) == 0.25 / 512
    # vectors: CartPole learns at 8 samples per step; less was never measured, so it stays
    assert adaptive_replay_ratio("discrete-vector", 256, 1_000, 50_000) == 8 / 256


def test_apex_measures_the_learner_at_start_and_records_it():
    resolved, defaults = resolve_task_defaults(experiment("apex-dqn", rollouts={"workers": 2}), cores=2)
    assert defaults is not None and defaults.kind == "discrete-vector"
    assert hyperparams_for(resolved).replay_ratio == 8 / 256
    record = defaults.record()
    assert record["machine"]["learnerSamplesPerSecond"] > 0 and record["machine"]["samplerStepsPerSecond"] > 0
    assert record["machine"]["chosen"] == ["config.replayRatio"]
    _, unmeasured = resolve_task_defaults(experiment("apex-dqn"), measure=False, cores=2)  # kuberl validate
    assert unmeasured.line().endswith("; replayRatio: measured when training starts")
    on_gpu, gpu_defaults = resolve_task_defaults(experiment("apex-dqn", learner={"gpus": 1}), cores=2)
    assert hyperparams_for(on_gpu).replay_ratio == 8 / 256 and "learnerSamplesPerSecond" not in gpu_defaults.machine
    assert gpu_defaults.line().endswith("; replayRatio: the published one, for a learner on a GPU")
    user, defaults = resolve_task_defaults(experiment("apex-dqn", config={"replayRatio": 0.5}), cores=2)
    assert hyperparams_for(user).replay_ratio == 0.5 and "learnerSamplesPerSecond" not in defaults.machine


def test_a_manifest_file_loaded_in_python_gets_the_defaults_the_builder_does_not(tmp_path):
    from kuberl.trainer.algorithms.config import AlgorithmConfig
    from kuberl.trainer.algorithms.ppo import PPOConfig

    loaded = AlgorithmConfig.from_manifest(write(tmp_path, doc("ppo", "Pendulum-v1")))
    assert loaded.params.num_epochs == 10 and loaded.experiment.spec.rollouts.fragment_length == 256
    built = PPOConfig().environment("Pendulum-v1")
    assert built.params.num_epochs == 8 and built.experiment.spec.rollouts.fragment_length == 64


def test_the_head_pod_tells_the_manifests_fields_from_the_operators_dump(tmp_path):
    from kuberl.operator.builders.configmap import experiment_yaml

    applied = experiment("sac", "Pendulum-v1", rollouts={"workers": 0, "fragmentLength": 32})
    in_pod = yaml.safe_load(experiment_yaml(applied))  # every default written out, envsPerWorker: 8 among them
    assert in_pod["spec"]["rollouts"]["envsPerWorker"] == 8
    resolved, _ = resolve_task_defaults(validate_document(in_pod))
    assert resolved.spec.rollouts.envs_per_worker == 1  # the continuous-control set's, not the dump's
    assert resolved.spec.rollouts.fragment_length == 32  # the manifest's
    del in_pod["metadata"]["annotations"]  # an older operator's file: every dumped field counts as set
    older, _ = resolve_task_defaults(validate_document(in_pod))
    assert older.spec.rollouts.envs_per_worker == 8 and hyperparams_for(older).learning_starts == 5_000


# Multi-agent (PettingZoo) envs: the kind comes from each policy's agents' spaces.
RELAY = "kuberl_testing.multi_agent_envs:relay_env"


def test_a_multi_agent_envs_kind_comes_from_its_policies_spaces():
    discrete = validate_document(doc("ppo", "mpe2:simple_spread_v3"))
    assert detect_task_kind(discrete) == "discrete-vector"
    continuous = doc("ppo", "mpe2:simple_spread_v3")
    continuous["spec"]["env"]["config"] = {"continuous_actions": True}
    assert detect_task_kind(validate_document(continuous)) == "continuous-vector"
    assert detect_task_kind(experiment("ppo", "kuberl_testing.multi_agent_envs:PixelSidesEnv")) == "image"
    mixed = doc("ppo", RELAY, multiAgent={"policies": [{"name": "runners", "agents": ["runner_*"]},
                                                         {"name": "late", "agents": ["late_0"]}]})
    mixed["spec"]["env"]["config"] = {"box_late": True}
    assert detect_task_kind(validate_document(mixed)) is None


def test_one_kind_for_every_policy_applies_its_set_less_what_multi_agent_runs_refuse():
    manifest = doc("ppo", "mpe2:simple_spread_v3", config={"lr": 0.0005})
    manifest["spec"]["env"]["config"] = {"continuous_actions": True}
    resolved, defaults = resolve_task_defaults(validate_document(manifest))
    assert defaults is not None and defaults.kind == "continuous-vector"
    assert defaults.record()["policies"] == {"shared": "continuous-vector"}
    params = hyperparams_for(resolved)
    assert params.lr == 0.0005 and params.num_epochs == 10 and resolved.spec.rollouts.fragment_length == 256
    assert "config.observationFilter" not in defaults.values  # multi-agent runs refuse a filter
    assert resolved.spec.config.get("observationFilter", "none") == "none"
    from kuberl.trainer.multiagent.checks import multi_agent_env_errors

    assert multi_agent_env_errors(resolved) == []  # the resolved run passes the env checks


def test_policies_of_different_kinds_get_no_defaults_and_the_line_says_why(tmp_path, capsys):
    manifest = doc("ppo", RELAY, multiAgent={"policies": [{"name": "runners", "agents": ["runner_*"]},
                                                            {"name": "late", "agents": ["late_0"]}]})
    manifest["spec"]["env"]["config"] = {"box_late": True}
    original = validate_document(manifest)
    resolved, defaults = resolve_task_defaults(original)
    assert resolved is original and defaults is not None and defaults.kind is None and defaults.values == {}
    assert defaults.record()["policies"] == {"runners": "discrete-vector", "late": "continuous-vector"}
    assert main(["validate", "-f", write(tmp_path, manifest)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line == ("no task-kind defaults: the policies' tasks differ in kind (runners: discrete-vector, "
                    "late: continuous-vector); set their values in the manifest")


def test_sac_from_pixels_samples_uniformly_as_cleanrl_does():
    _, values = resolved_defaults(experiment("sac", "Pendulum-v1"), "image")
    assert values["replay.prioritized"] is False
    assert ReplaySpec().prioritized is True  # the model's own default, which the set used to leave on


def test_dqn_from_pixels_anneals_beta_over_the_runs_budget_not_until_learning_starts():
    _, values = resolved_defaults(experiment("dqn", "ALE/Pong-v5", "atari", stop={"timesteps": 5_000_000}), "image")
    assert values["config.priorityBetaTimesteps"] == 5_000_000 > values["config.learningStarts"]
    _, unbounded = resolved_defaults(experiment("dqn", "ALE/Pong-v5", "atari", stop={"timeSeconds": 3600}), "image")
    assert unbounded["config.priorityBetaTimesteps"] == 10_000_000  # RL Zoo's Atari budget
    resolved = with_values(experiment("dqn", "ALE/Pong-v5", "atari", stop={"timesteps": 5_000_000}), values)
    assert hyperparams_for(resolved).priority_beta_timesteps == 5_000_000
    mine = experiment("dqn", "ALE/Pong-v5", "atari", config={"priorityBetaTimesteps": 200_000})
    assert "config.priorityBetaTimesteps" not in resolved_defaults(mine, "image")[1]


@pytest.mark.parametrize("algorithm", ["impala", "appo"])
def test_impala_and_appo_have_no_unmeasured_continuous_set_and_say_so(algorithm, tmp_path, capsys):
    assert DEFAULTS[algorithm]["continuous-vector"].values == {}
    resolved, defaults = resolve_task_defaults(experiment(algorithm, "Pendulum-v1"), measure=False)
    assert defaults is not None and defaults.values == {} and defaults.record()["note"] == NOT_MEASURED
    assert hyperparams_for(resolved) == REGISTRY[algorithm].hyperparams()  # the algorithm's own defaults
    assert defaults.line() == (f"no continuous-control defaults for {algorithm}: no published or measured setting "
                               "for this algorithm on continuous control, so the algorithm's own defaults apply "
                               "(docs/manifest.md's hyperparameter tables)")
    assert main(["validate", "-f", write(tmp_path, doc(algorithm, "Pendulum-v1"))]) == 0
    assert f"no continuous-control defaults for {algorithm}" in capsys.readouterr().out


@pytest.mark.parametrize(("env", "preprocessing", "kind"), [("CartPole-v1", "none", "discrete-vector"),
                                                             ("ALE/Pong-v5", "atari", "image")])
def test_a_uniform_replay_gets_no_priority_settings_from_the_set(env, preprocessing, kind):
    """They would have no effect, and validation refuses such settings: a manifest that turns prioritization
    off must not fail on values the defaults wrote."""
    exp = experiment("dqn", env, preprocessing, replay={"prioritized": False})
    _, values = resolved_defaults(exp, kind)
    assert values and not [path for path in values if path.startswith("config.priority")]
    assert with_values(exp, values).spec.replay.prioritized is False
    _, prioritized = resolved_defaults(experiment("dqn", env, preprocessing), kind)
    assert "config.priorityAlpha" in prioritized
