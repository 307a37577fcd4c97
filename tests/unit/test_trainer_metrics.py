"""The trainer's /metrics: a prometheus_client collector over the run's latest figures, one registry per run."""

from __future__ import annotations

from prometheus_client import generate_latest

from kuberl.trainer.iteration_result import EvaluationResult, IterationResult
from kuberl.trainer.run.metrics import TrainerMetrics, metrics_registry
from kuberl_testing.grafana_dashboard import load_dashboard, metric_names, queries, series_names

RESULT = {"iteration": 3, "timesteps": 6144, "episodes": 40, "episodeReturnMean": 55.5, "envStepsPerSecond": 2048.0,
          "learner": {"updatesTotal": 96, "policyLagMean": 1.5, "policyLagMax": 4}}


def typed(result: dict) -> IterationResult:
    return IterationResult.from_json(result)


def test_counters_are_the_results_totals_and_gauges_its_latest_figures():
    metrics = TrainerMetrics()
    registry = metrics_registry(metrics)
    assert registry.get_sample_value("kuberl_env_steps_total") == 0.0  # served before the first result
    metrics.on_iteration_end(typed(RESULT), stopping=False)
    metrics.on_iteration_end(typed({**RESULT, "iteration": 4, "timesteps": 8192, "episodes": 51, "episodeReturnMean": None,
                              "learner": {"updatesTotal": 128}}), stopping=False)
    assert registry.get_sample_value("kuberl_env_steps_total") == 8192
    assert registry.get_sample_value("kuberl_episodes_total") == 51
    assert registry.get_sample_value("kuberl_learner_updates_total") == 128
    assert registry.get_sample_value("kuberl_training_iteration") == 4
    assert registry.get_sample_value("kuberl_episode_return_mean") == 55.5  # a result without one keeps the last
    assert registry.get_sample_value("kuberl_policy_lag_max") == 4


def test_a_resumed_run_counts_from_its_checkpoints_totals():
    metrics = TrainerMetrics()
    metrics.on_iteration_end(typed({**RESULT, "iteration": 41, "timesteps": 1_000_000}), stopping=False)
    assert metrics_registry(metrics).get_sample_value("kuberl_env_steps_total") == 1_000_000


def test_replay_per_shard_and_a_learners_own_buffer_as_shard_0():
    sharded, local = TrainerMetrics(), TrainerMetrics()
    sharded.on_iteration_end(typed({**RESULT, "replay": {"shard_0": {"size": 10, "capacity": 100},
                                                         "shard_1": {"size": 12, "capacity": 100}}}), stopping=False)
    local.on_iteration_end(typed({**RESULT, "replay": {"shard_0": {"size": 7, "capacity": 50},
                                                       "bytesPerTransition": 48}}), stopping=False)
    registry = metrics_registry(sharded)
    assert registry.get_sample_value("kuberl_replay_size", {"shard": "shard_1"}) == 12
    assert registry.get_sample_value("kuberl_replay_capacity", {"shard": "shard_0"}) == 100
    assert metrics_registry(local).get_sample_value("kuberl_replay_size", {"shard": "shard_0"}) == 7
    assert metrics_registry(local).get_sample_value("kuberl_replay_size", {"shard": "shard_1"}) is None


def test_evaluations_and_checkpoints():
    metrics = TrainerMetrics()
    registry = metrics_registry(metrics)
    assert registry.get_sample_value("kuberl_last_checkpoint_timestamp_seconds") == 0
    metrics.on_evaluation(EvaluationResult.from_json({"iteration": 10, "returnMean": 180.0}))
    metrics.on_evaluation(EvaluationResult.from_json({"iteration": 20, "returnMean": 200.5}))
    metrics.on_checkpoint_written(None, 0.3)  # type: ignore[arg-type]  # the info is not read
    metrics.on_checkpoint_written(None, 7.0)  # type: ignore[arg-type]
    assert registry.get_sample_value("kuberl_evaluations_total") == 2
    assert registry.get_sample_value("kuberl_evaluation_return_mean") == 200.5
    assert registry.get_sample_value("kuberl_evaluation_iteration") == 20
    assert registry.get_sample_value("kuberl_checkpoint_duration_seconds_count") == 2
    assert registry.get_sample_value("kuberl_checkpoint_duration_seconds_bucket", {"le": "0.5"}) == 1
    assert registry.get_sample_value("kuberl_checkpoint_duration_seconds_sum") == 7.3
    assert registry.get_sample_value("kuberl_last_checkpoint_timestamp_seconds") > 1.7e9


def test_two_runs_in_one_process_keep_their_own_figures():
    first, second = TrainerMetrics(), TrainerMetrics()
    first.on_iteration_end(typed(RESULT), stopping=False)
    assert metrics_registry(second).get_sample_value("kuberl_env_steps_total") == 0
    assert metrics_registry(first).get_sample_value("kuberl_env_steps_total") == 6144


def test_a_scrape_carries_every_trainer_series_the_dashboard_queries_and_the_process_metrics():
    metrics = TrainerMetrics()
    metrics.on_iteration_end(typed({**RESULT, "replay": {"shard_0": {"size": 1, "capacity": 2}}}), stopping=False)
    metrics.on_evaluation(EvaluationResult.from_json({"iteration": 3, "returnMean": 1.0}))
    metrics.on_checkpoint_written(None, 1.0)  # type: ignore[arg-type]
    served = series_names(generate_latest(metrics_registry(metrics)).decode())
    wanted = {name for _, expr in queries(load_dashboard()) for name in metric_names(expr)
              if name.startswith("kuberl_") and not name.startswith("kuberl_operator_")}
    assert wanted and wanted <= served, wanted - served
    assert "process_resident_memory_bytes" in served
