"""What spec.env.id names for multi-agent training, and the env checks that need the env: space clashes, agents
without a policy, algorithms that cannot train several agents, each error naming its field."""

from __future__ import annotations

import pytest

from kuberl.api.validation import validate_document
from kuberl.trainer.multiagent.envs import MultiAgentEnvError, agent_spaces, is_multi_agent, make_parallel_env
from kuberl.trainer.run.checks import env_errors

RELAY = "kuberl_testing.multi_agent_envs:relay_env"


def experiment(env_id: str, multi_agent: dict | None = None, *, algorithm: str = "ppo", config: dict | None = None,
               env_config: dict | None = None, **spec: object):
    body = {"algorithm": algorithm, "env": {"id": env_id, "config": env_config or {}}, "config": config or {},
            "stop": {"timesteps": 100}, **spec}
    if multi_agent is not None:
        body["multiAgent"] = multi_agent
    return validate_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                              "metadata": {"name": "ma"}, "spec": body})


def errors(*args: object, **kwargs: object) -> dict[str, str]:
    """field -> its messages, joined."""
    found: dict[str, str] = {}
    for error in env_errors(experiment(*args, **kwargs)):
        found[error.path] = f"{found[error.path]}; {error.message}" if error.path in found else error.message
    return found


@pytest.mark.parametrize(("env_id", "multi"), [
    ("mpe2:simple_spread_v3", True),
    ("pettingzoo.butterfly:pistonball_v6", True),
    ("pettingzoo.sisl:multiwalker_v9", True),
    (RELAY, True),
    ("kuberl_testing.multi_agent_envs:RelayEnv", True),
    ("CartPole-v1", False),
    ("kuberl_testing.catch_env:PixelCatch", False),
])
def test_ids_tell_multi_agent_envs_apart(env_id: str, multi: bool) -> None:
    assert is_multi_agent(env_id) is multi


def test_module_form_passes_env_config_to_parallel_env() -> None:
    spaces = agent_spaces("mpe2:simple_spread_v3", {"N": 2, "max_cycles": 5})
    assert spaces.agents == ("agent_0", "agent_1")


def test_parallelizable_aec_env_is_converted_and_turn_based_one_refused() -> None:
    env = make_parallel_env("kuberl_testing.multi_agent_envs:ParallelizableTurnsEnv")
    env.reset(seed=0)
    assert env.agents == ["player_0", "player_1"]
    with pytest.raises(MultiAgentEnvError, match="TurnTakingEnv.*turn-based AEC env"):
        make_parallel_env("kuberl_testing.multi_agent_envs:TurnTakingEnv")
    found = errors("kuberl_testing.multi_agent_envs:TurnTakingEnv")
    assert "turn-based" in found["spec.env.id"] and "TurnTakingEnv" in found["spec.env.id"]


def test_shared_default_policy_over_different_spaces_names_the_clashing_agents() -> None:
    found = errors("mpe2:simple_speaker_listener_v4")
    assert "'speaker_0'" in found["spec.multiAgent"] and "'listener_0'" in found["spec.multiAgent"]
    assert "observation spaces differ" in found["spec.multiAgent"] and "Discrete(5)" in found["spec.multiAgent"]


def test_one_policy_over_clashing_spaces_names_the_policy_field() -> None:
    found = errors(RELAY, {"policies": [{"name": "all", "agents": ["*"]}]}, env_config={"wide_late": True})
    assert "'late_0' has Box(4,)" in found["spec.multiAgent.policies[0].agents"]


def test_heterogeneous_agents_on_their_own_policies_pass() -> None:
    assert errors("mpe2:simple_speaker_listener_v4", {"policies": [
        {"name": "speaker", "agents": ["speaker_0"]}, {"name": "listener", "agents": ["listener_*"]}]}) == {}


def test_an_agent_left_without_a_policy_is_named() -> None:
    found = errors("mpe2:simple_speaker_listener_v4", {"policies": [{"name": "speaker", "agents": ["speaker_0"]}]})
    assert "'listener_0'" in found["spec.multiAgent.policies"]


def test_algorithms_without_multi_agent_training_are_refused_by_name() -> None:
    found = errors("mpe2:simple_spread_v3", algorithm="dqn")
    assert "dqn does not train multi-agent envs" in found["spec.algorithm"]


def test_multi_agent_on_a_single_agent_env_is_refused() -> None:
    assert "single-agent env" in errors("CartPole-v1", {"agentIdFeature": True})["spec.multiAgent"]


def test_an_observation_filter_is_refused() -> None:
    found = errors(RELAY, config={"observationFilter": "mean_std"}, checkpoint={"export": ["onnx"]},
                   evaluation={"interval": 1, "workers": 2, "video": {}})
    assert set(found) == {"spec.config.observationFilter"}


PISTONBALL = "pettingzoo.butterfly:pistonball_v6"
SMALL_PISTONBALL = {"n_pistons": 3, "continuous": True, "max_cycles": 5}
SHRINK = [{"name": "supersuit:color_reduction_v0", "kwargs": {"mode": "B"}},
          {"name": "supersuit:resize_v1", "kwargs": {"x_size": 42, "y_size": 42}},
          {"name": "supersuit:frame_stack_v1", "kwargs": {"stack_size": 3}}]


def test_wrappers_wrap_the_parallel_env_in_order() -> None:
    """SuperSuit's wrappers take the ParallelEnv: pistonball's 457x120 RGB crops become 3 stacked 42x42 frames,
    in the spaces the policies are built for and in the env the workers step."""
    from kuberl.trainer.multiagent.envs import spec_agent_spaces

    spec = experiment(PISTONBALL, env_config=SMALL_PISTONBALL).spec
    raw = spec_agent_spaces(spec.env).observation_spaces["piston_0"]
    assert raw.shape == (457, 120, 3)
    wrapped_spec = experiment(PISTONBALL, env_config=SMALL_PISTONBALL, env={
        "id": PISTONBALL, "config": SMALL_PISTONBALL, "wrappers": SHRINK}).spec
    space = spec_agent_spaces(wrapped_spec.env).observation_spaces["piston_0"]
    assert space.shape == (42, 42, 3) and space.dtype.name == "uint8"
    assert errors(PISTONBALL, env={"id": PISTONBALL, "config": SMALL_PISTONBALL, "wrappers": SHRINK}) == {}


def test_a_wrapper_that_cannot_wrap_is_named_by_its_field() -> None:
    def found(wrappers: list[dict]) -> dict[str, str]:
        return errors(RELAY, env={"id": RELAY, "wrappers": wrappers})

    assert "cannot import module 'no_such_package'" in found(
        [{"name": "no_such_package:resize"}])["spec.env.wrappers[0].name"]
    assert "does not take these kwargs" in found(
        [SHRINK[2], {"name": "supersuit:frame_stack_v1", "kwargs": {"depth": 3}}])["spec.env.wrappers[1].kwargs"]
    assert "not callable" in found([{"name": "supersuit:__version__"}])["spec.env.wrappers[0].name"]
    assert "not a PettingZoo ParallelEnv" in found([{"name": "builtins:repr"}])["spec.env.wrappers[0].name"]


def test_atari_preprocessing_is_refused_for_a_multi_agent_env() -> None:
    assert "spec.env.wrappers" in errors(RELAY, env={"id": RELAY, "preprocessing": "atari"})["spec.env.preprocessing"]


def test_a_shared_policy_minibatch_counts_the_agents_rows() -> None:
    """8 x 20 env steps of 3 agents are 480 rows for the shared policy: a minibatch of 400 fits. The API cannot
    know the agents, so it leaves the check to the env checks, which pass it for a multi-agent env and still
    refuse it for a gymnasium.Env class (the same id form)."""
    rollouts = {"workers": 0, "envsPerWorker": 8, "fragmentLength": 20}
    assert errors("mpe2:simple_spread_v3", config={"minibatchSize": 400}, rollouts=rollouts) == {}
    found = errors("kuberl_testing.catch_env:PixelCatch", config={"minibatchSize": 400}, rollouts=rollouts)
    assert found["spec.config.minibatchSize"].startswith("must be <= the train batch (160")


def test_a_wrapper_that_refuses_the_env_is_named() -> None:
    """SuperSuit's color reduction on simple_spread's vectors: the wrapper's own error, under its field."""
    found = errors("mpe2:simple_spread_v3", env={"id": "mpe2:simple_spread_v3", "wrappers": [
        {"name": "supersuit:color_reduction_v0"}]})
    assert found["spec.env.wrappers[0].name"].startswith("supersuit:color_reduction_v0 cannot wrap this env")
