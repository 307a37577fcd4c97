"""Episode records as the episode traces hold them: their keys, in their order, from a single-agent and a
multi-agent rollout worker, through the trace writer and back."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from kuberl.trainer.sampling.rollout_worker import RolloutWorker, WorkerConfig
from kuberl.trainer.storage.local import LocalStore
from kuberl.trainer.storage.traces import TraceWriter, read_traces
from kuberl_testing.multi_agent_workers import relay_worker

RECORD_KEYS = ["experiment", "worker", "episode", "env", "return", "length", "policyVersion", "startTime", "endTime"]
CATCH = "kuberl_testing.catch_env:PixelCatch"  # every episode is 11 steps


class StayPolicy:
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int) -> None: ...

    def compute_actions(self, obs: np.ndarray, explore: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return np.ones(len(obs), dtype=np.int64), {}

    def set_weights(self, weights: object) -> None: ...


def written_and_read_back(tmp_path, records: list) -> list[dict]:
    store = LocalStore(tmp_path / "run")
    writer = TraceWriter(store, 0)
    for record in records:
        writer.write(record)
    assert writer.close()
    return list(read_traces(store))


def test_a_single_agent_record_has_its_keys_in_order_in_the_traces(tmp_path) -> None:
    config = WorkerConfig(CATCH, num_envs=1, fragment_length=11, experiment="catch", record_steps=True)
    (record,) = RolloutWorker(config, StayPolicy, worker_index=2).sample().episodes
    assert list(record) == [*RECORD_KEYS, "steps"]
    assert (record["experiment"], record["worker"], record["episode"], record["env"]) == ("catch", 2, 1, CATCH)
    assert record["length"] == len(record["steps"]) == 11
    assert [list(step) for step in record["steps"]] == [["obs", "action", "reward"]] * 11
    (line,) = written_and_read_back(tmp_path, [record])
    assert list(line) == list(record) and line["steps"][0]["action"] == 1

    unrecorded = WorkerConfig(CATCH, num_envs=1, fragment_length=11)
    (record,) = RolloutWorker(unrecorded, StayPolicy).sample().episodes
    assert list(record) == RECORD_KEYS


def test_a_multi_agent_record_has_its_agents_after_its_length_and_its_steps_last(tmp_path) -> None:
    (record,) = relay_worker(None, record_steps=True).sample().episodes
    assert list(record) == [*RECORD_KEYS[:6], "agents", *RECORD_KEYS[6:], "steps"]
    assert all(list(agent) == ["policy", "return", "length"] for agent in record["agents"].values())
    assert {list(step)[:2] == ["step", "agent"] and list(step)[2:] == ["obs", "action", "reward"]
            for step in record["steps"]} == {True}
    (line,) = written_and_read_back(tmp_path, [record])
    assert list(line) == list(record) and list(line["agents"]) == list(record["agents"])

    (record,) = relay_worker(None).sample().episodes
    assert list(record) == [*RECORD_KEYS[:6], "agents", *RECORD_KEYS[6:]]
