"""The AlgorithmConfig builder's manifest document: every builder method's keywords land under their section in
the manifest's camelCase names, in the order given, and what is left None is not written."""

from __future__ import annotations

import json

from kuberl.trainer.algorithms.ppo import PPOConfig


def test_every_section_of_the_builder_writes_the_manifest_document() -> None:
    config = (
        PPOConfig().environment("CartPole-v1", env_config={"sutton_barto_reward": False}, preprocessing="none",
                                wrappers=[{"name": "gymnasium.wrappers:TimeLimit", "kwargs": {"max_episode_steps": 9}}])
        .rollouts(workers=2, envs_per_worker=4, fragment_length=None, env_threads=1)
        .replay(capacity=1000)
        .training(lr=3e-4, num_epochs=3).resources(learner_gpus=0, learner_bf16="auto").debugging(seed=7)
        .stopping(timesteps=500, episode_return_mean=150.0)
        .checkpointing(every_iterations=5, keep_best=True).traces(enabled=True)
        .evaluation(interval=2, episodes=3, env_config={"render_mode": None}, video_every_evaluations=4)
        .multi_agent(policies_to_train=["a"]).named("built", namespace="ns")
    )
    expected = {
        "apiVersion": config.document["apiVersion"], "kind": "RLExperiment",
        "metadata": {"name": "built", "namespace": "ns"},
        "spec": {
            "algorithm": "ppo",
            "env": {"id": "CartPole-v1", "config": {"sutton_barto_reward": False}, "preprocessing": "none",
                    "wrappers": [{"name": "gymnasium.wrappers:TimeLimit", "kwargs": {"max_episode_steps": 9}}]},
            "config": {"lr": 3e-4, "numEpochs": 3, "seed": 7},
            "rollouts": {"workers": 2, "envsPerWorker": 4, "envThreads": 1},
            "replay": {"capacity": 1000},
            "learner": {"gpus": 0, "bf16": "auto"},
            "stop": {"timesteps": 500, "episodeReturnMean": 150.0},
            "checkpoint": {"everyIterations": 5, "keepBest": True},
            "traces": {"enabled": True},
            "evaluation": {"interval": 2, "episodes": 3, "envConfig": {"render_mode": None},
                           "video": {"everyEvaluations": 4}},
            "multiAgent": {"policiesToTrain": ["a"]},
        },
    }
    assert json.dumps(config.to_document()) == json.dumps(expected)  # key for key, in order


def test_a_later_call_changes_a_section_and_the_built_experiment() -> None:
    config = PPOConfig().environment("CartPole-v1").rollouts(workers=0, envs_per_worker=2)
    assert config.experiment.spec.rollouts.envs_per_worker == 2
    config.rollouts(envs_per_worker=5)
    assert config.to_document()["spec"]["rollouts"] == {"workers": 0, "envsPerWorker": 5}
    assert config.experiment.spec.rollouts.envs_per_worker == 5
