"""The trainer's settings, read once from the environment, and the order the run's observers hear in."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kuberl.api.contract import DEFAULT_STATUS_PORT, TERMINATION_LOG
from kuberl.trainer.iteration_result import EvaluationLine, EvaluationResult, IterationResult
from kuberl.trainer.run.observer import Observers, RunObserver
from kuberl.trainer.run.settings import SettingsError, TrainerSettings


def test_defaults_when_nothing_is_set():
    settings = TrainerSettings.from_env({})
    assert settings == TrainerSettings()
    assert settings.attempt is None and settings.namespace is None and settings.status_host is None
    assert settings.status_port == DEFAULT_STATUS_PORT and settings.termination_log == TERMINATION_LOG
    assert (settings.node_wait_seconds, settings.final_checkpoint_seconds) == (300.0, 600.0)


def test_what_the_operator_sets_on_the_head():
    env = {"KUBERL_ATTEMPT": "3", "KUBERL_EXPERIMENT_NAMESPACE": "research", "KUBERL_EXPECTED_NODES": "3",
           "KUBERL_STATUS_PORT": "9191", "KUBERL_STATUS_HOST": "127.0.0.9", "KUBERL_TERMINATION_LOG": "/tmp/log",
           "KUBERL_NODE_WAIT_SECONDS": "180", "KUBERL_FINAL_CHECKPOINT_SECONDS": "5.5"}
    settings = TrainerSettings.from_env(env, in_cluster=True)
    assert settings == TrainerSettings(attempt=3, namespace="research", expected_nodes=3, status_port=9191,
                                       status_host="127.0.0.9", termination_log="/tmp/log", node_wait_seconds=180.0,
                                       final_checkpoint_seconds=5.5, log_chunks=True)  # output to storage in a pod


def test_head_only_settings_are_read_only_in_a_cluster():
    local = TrainerSettings.from_env({"KUBERL_STATUS_PORT": "not a port", "KUBERL_EXPECTED_NODES": ""})
    assert local.status_port == DEFAULT_STATUS_PORT and local.expected_nodes is None
    with pytest.raises(SettingsError, match="KUBERL_STATUS_PORT='not a port' is not an integer"):
        TrainerSettings.from_env({"KUBERL_STATUS_PORT": "not a port"}, in_cluster=True)


def test_an_empty_attempt_is_attempt_0_and_a_bad_one_names_its_variable():
    assert TrainerSettings.from_env({"KUBERL_ATTEMPT": ""}).attempt == 0
    with pytest.raises(SettingsError, match="KUBERL_FINAL_CHECKPOINT_SECONDS='soon' is not a number"):
        TrainerSettings.from_env({"KUBERL_FINAL_CHECKPOINT_SECONDS": "soon"})


PLAYED = EvaluationResult.of(1, 0, [1.0], [1])


def test_observers_hear_each_hook_in_the_order_they_were_added():
    heard: list[str] = []

    class Named(RunObserver):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_result(self, result: IterationResult) -> IterationResult:
            heard.append(f"{self.name}.on_result")
            return replace(result, extra={**result.extra, self.name: True})

        def on_last_result(self, result: IterationResult) -> tuple[IterationResult, list[EvaluationLine]]:
            return replace(result, iteration=result.iteration + 1), [EvaluationLine(result.iteration, 0, PLAYED)]

    observers = Observers()
    for name in ("tracking", "evaluation"):
        observers.add(Named(name))
    observers.add(RunObserver())  # every hook of the base does nothing
    result = observers.on_result(IterationResult.from_json({"iteration": 1, "timesteps": 10}))
    assert heard == ["tracking.on_result", "evaluation.on_result"] and list(result.extra) == ["tracking", "evaluation"]
    last, lines = observers.on_last_result(result)
    assert last.iteration == 3 and [line.iteration for line in lines] == [1, 2]
