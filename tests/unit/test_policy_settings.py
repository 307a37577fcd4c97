"""The settings a sampling policy is configured with, and a replay-shard worker's report: what reaches the policy's
`configure` and a results line's `workers` entry, without Ray."""

from __future__ import annotations

import pickle

import pytest

from kuberl.trainer.distributed.placement import Placement
from kuberl.trainer.distributed.shard_worker import ShardRolloutWorker, WorkerReport
from kuberl.trainer.sampling.policy_settings import PolicySettings
from kuberl.trainer.storage.jsonl import dumps_record


def test_configure_gets_the_set_fields_only_false_and_zero_included() -> None:
    assert PolicySettings().kwargs() == {}
    assert not PolicySettings() and PolicySettings(uniform=False) and PolicySettings(epsilon=0.0)  # nothing to send
    assert PolicySettings(epsilon=0.0).kwargs() == {"epsilon": 0.0}
    assert PolicySettings(uniform=False).kwargs() == {"uniform": False}
    assert list(PolicySettings(uniform=True, epsilon=0.5).kwargs()) == ["epsilon", "uniform"]


def test_settings_that_changed_and_settings_accumulated() -> None:
    current = PolicySettings(epsilon=0.5, uniform=True)
    assert PolicySettings(epsilon=0.5, uniform=False).changed_from(current) == PolicySettings(uniform=False)
    assert PolicySettings(epsilon=0.5).changed_from(current) == PolicySettings()
    assert PolicySettings(epsilon=0.1).changed_from(PolicySettings()) == PolicySettings(epsilon=0.1)
    assert current.updated(PolicySettings(epsilon=0.2)) == PolicySettings(epsilon=0.2, uniform=True)
    assert current.updated(PolicySettings()) == current
    assert pickle.loads(pickle.dumps(current)) == current  # Ray sends it to the actors


class _Recorder:
    def __init__(self) -> None:
        self.configured: list[dict[str, float | bool]] = []

    def configure_policy(self, settings: PolicySettings) -> None:
        self.configured.append(settings.kwargs())


def test_a_shard_worker_configures_its_policy_with_what_changed_only() -> None:
    worker = ShardRolloutWorker.__new__(ShardRolloutWorker)
    worker.worker = recorder = _Recorder()  # type: ignore[assignment]
    worker.policy_settings = PolicySettings()
    for settings in (PolicySettings(epsilon=0.4, uniform=True), PolicySettings(epsilon=0.4, uniform=True),
                     PolicySettings(epsilon=0.3, uniform=True), PolicySettings(), PolicySettings(uniform=False)):
        worker._configure(settings)
    assert recorder.configured == [{"epsilon": 0.4, "uniform": True}, {"epsilon": 0.3}, {"uniform": False}]
    assert worker.policy_settings == PolicySettings(epsilon=0.3, uniform=False)  # what its reports carry


PLACED: Placement = {"node": "abc", "nodeIp": "10.0.0.7", "host": "run-worker-0"}


def _report(env_steps: int, seconds: float, *, version: int, settings: PolicySettings,
            placement: Placement | None = PLACED) -> WorkerReport:
    return WorkerReport(2, env_steps, 10 * env_steps, env_steps, seconds, [{"return": 1.0, "length": env_steps}],
                        policy_version=version, weight_updates=version - 1, shard_errors=0, settings=settings,
                        placement=placement)


def test_a_workers_entry_keeps_the_results_lines_key_order() -> None:
    report = _report(64, 0.5, version=3, settings=PolicySettings(epsilon=0.25))
    entry = report.to_json(env_steps_per_second=128.0, episode_return_mean=9.5)
    assert dumps_record(entry) == (
        '{"envSteps":64,"seconds":0.5,"policyVersion":3,"weightUpdates":2,"shardErrors":0,"epsilon":0.25,'
        '"envStepsPerSecond":128.0,"node":"abc","nodeIp":"10.0.0.7","host":"run-worker-0","episodeReturnMean":9.5}')
    sac = _report(64, 0.5, version=1, settings=PolicySettings(uniform=True), placement=None)
    assert list(sac.to_json(env_steps_per_second=1.0, episode_return_mean=None)) == [
        "envSteps", "seconds", "policyVersion", "weightUpdates", "shardErrors", "uniform", "envStepsPerSecond",
        "node", "episodeReturnMean"]
    assert sac.to_json(env_steps_per_second=1.0, episode_return_mean=None)["node"] is None


def test_a_workers_reports_of_one_iteration_add_up_and_keep_its_latest_state() -> None:
    first = _report(64, 0.5, version=3, settings=PolicySettings(epsilon=0.25))
    second = _report(32, 0.25, version=5, settings=PolicySettings(epsilon=0.125))
    both = second.after(first)
    assert (both.env_steps, both.sent_bytes, both.sent_transitions) == (96, 960, 96)
    assert both.seconds == pytest.approx(0.75)
    assert [e["length"] for e in both.episodes] == [64, 32]
    assert (both.policy_version, both.weight_updates, both.settings) == (5, 4, PolicySettings(epsilon=0.125))
