"""spec.tracking.mlflow against a real `mlflow server` on loopback: params, metrics by step, the final
checkpoint and policy as artifacts, tags, a resumed run continuing the same MLflow run, and training
that survives the server being stopped mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from kuberl_testing.fault_figures import report_figures
from kuberl_testing.manifests import experiment_manifest
from kuberl_testing.mlflow_server import MLflowServer


@pytest.fixture(scope="module")
def module_mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MLflowServer]:
    """One server for the module: its start is 12-30 s of imports on a busy 2-core machine."""
    server = MLflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def mlflow_server(module_mlflow_server: MLflowServer) -> MLflowServer:
    """The module's server, running: started again if a test before this one stopped it."""
    if not module_mlflow_server.running:
        module_mlflow_server.start()
    return module_mlflow_server


def manifest(tmp_path: Path, name: str, iterations: int, uri: str, stop: dict | None = None,
             experiment: str = "kuberl-tests") -> str:
    path = tmp_path / f"{name}-{iterations}.yaml"
    path.write_text(experiment_manifest(
        name, stop=stop or {"iterations": iterations},
        checkpoint={"everyIterations": 2, "keep": 2, "export": ["torchscript"]},
        tracking={"mlflow": {"uri": uri, "experiment": experiment}},
    ))
    return str(path)


def train(tmp_path: Path, path: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kuberl.cli", "train", "-f", path], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def finished(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err


def results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]


def test_params_metrics_artifacts_and_a_resume_into_the_same_run(tmp_path: Path, mlflow_server: MLflowServer) -> None:
    code, out, err = finished(train(tmp_path, manifest(tmp_path, "tracked", 4, mlflow_server.uri)))
    assert code == 0, err
    run_dir = tmp_path / "kuberl-runs" / "tracked"
    stored = json.loads((run_dir / "tracking" / "mlflow.json").read_text())
    client = MlflowClient(mlflow_server.uri)
    run = client.get_run(stored["runId"])
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "kuberl-tests"
    params = run.data.params
    assert params["algorithm"] == "ppo" and params["env.id"] == "CartPole-v1"
    assert params["rollouts.envsPerWorker"] == "4" and params["checkpoint.export"] == '["torchscript"]'
    assert run.data.tags["kuberl.io/experiment"] == "tracked" and run.data.tags["kuberl.io/attempt"] == "0"
    lines = results(run_dir)
    history = client.get_metric_history(run.info.run_id, "episodeReturnMean")
    assert sorted(m.step for m in history) == [r["timesteps"] for r in lines]
    losses = client.get_metric_history(run.info.run_id, "learner/policyLoss")
    assert sorted((m.step, round(m.value, 5)) for m in losses) == [
        (r["timesteps"], round(r["learner"]["policyLoss"], 5)) for r in lines]
    checkpoint = {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "checkpoint")}
    assert {"counters.json", "model.pt", "optimizer.pt", "experiment.yaml"} <= checkpoint
    assert [a.path for a in client.list_artifacts(run.info.run_id, "policy")] == ["policy/policy.pt"]
    policy = client.download_artifacts(run.info.run_id, "policy/policy.pt", str(tmp_path))
    import torch

    actions = torch.jit.load(policy)(torch.zeros(3, 4))
    assert actions.shape == (3,) and actions.dtype == torch.int64

    code, out, err = finished(train(tmp_path, manifest(tmp_path, "tracked", 6, mlflow_server.uri)))
    assert code == 0, err
    assert "resuming from" in out
    assert json.loads((run_dir / "tracking" / "mlflow.json").read_text())["runId"] == stored["runId"]
    assert len(client.search_runs([run.info.experiment_id])) == 1
    run = client.get_run(stored["runId"])
    assert run.info.status == "FINISHED" and run.data.tags["kuberl.io/attempt"] == "1"
    history = client.get_metric_history(run.info.run_id, "episodeReturnMean")
    assert sorted(m.step for m in history) == [r["timesteps"] for r in results(run_dir)]


def test_a_multi_agent_run_logs_every_policy(tmp_path: Path, mlflow_server: MLflowServer) -> None:
    path = tmp_path / "ma.yaml"
    path.write_text(experiment_manifest(
        "tracked-ma", env="mpe2:simple_speaker_listener_v4", rollouts={"workers": 0, "envsPerWorker": 2,
                                                                       "fragmentLength": 25},
        stop={"iterations": 1}, tracking={"mlflow": {"uri": mlflow_server.uri, "experiment": "kuberl-tests"}},
        multiAgent={"policies": [{"name": "speaker", "agents": ["speaker_0"]},
                                 {"name": "listener", "agents": ["listener_0"]}]}))
    code, out, err = finished(train(tmp_path, str(path)))
    assert code == 0, err
    stored = json.loads((tmp_path / "kuberl-runs" / "tracked-ma" / "tracking" / "mlflow.json").read_text())
    client = MlflowClient(mlflow_server.uri)
    run_id = stored["runId"]
    assert sorted(a.path for a in client.list_artifacts(run_id, "policy")) == [
        "policy/policy-listener.onnx", "policy/policy-speaker.onnx"]
    import numpy as np
    import onnxruntime

    for name, observation_size, actions in (("speaker", 3, 3), ("listener", 11, 5)):
        file = client.download_artifacts(run_id, f"policy/policy-{name}.onnx", str(tmp_path))
        session = onnxruntime.InferenceSession(file)
        assert json.loads(session.get_modelmeta().custom_metadata_map["kuberl"])["policy"] == name
        (chosen,) = session.run(None, {session.get_inputs()[0].name: np.zeros((2, observation_size), np.float32)})
        assert chosen.shape == (2,) and all(0 <= a < actions for a in chosen)


def test_training_survives_the_server_stopping_mid_run(tmp_path: Path, mlflow_server: MLflowServer) -> None:
    # The module's server (the last test of the module stops it; a test after this one would start it again).
    server = mlflow_server
    # The run goes on until the test has seen what it checks, then ends by SIGTERM as a pod would: its
    # timeSeconds only bounds a run the test lost. What is queued for the dead server at the end waits 1 s, not
    # the default 60 (the bound is what counts here, not its length).
    process = train(tmp_path, manifest(tmp_path, "orphan", 0, server.uri, stop={"timeSeconds": 600},
                                      experiment="kuberl-tests-orphan"),
                    {"KUBERL_MLFLOW_CLOSE_SECONDS": "1"})
    run_dir = tmp_path / "kuberl-runs" / "orphan"
    try:
        try:
            client = MlflowClient(server.uri)
            deadline = time.monotonic() + 180  # a hang guard
            logged: list = []
            while not logged and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.5)
                stored = run_dir / "tracking" / "mlflow.json"
                if stored.exists():
                    logged = client.get_metric_history(json.loads(stored.read_text())["runId"], "timeSeconds")
            assert logged, "no metric reached MLflow"
        finally:
            # By PID, mid-run, with SIGKILL: a graceful stop waits for the trainer's open connections.
            server.stop(grace_seconds=0)
        stopped_at = len(results(run_dir))

        def flagged_after_the_kill() -> bool:
            lines = results(run_dir)
            return process.poll() is not None or (len(lines) > stopped_at + 1 and any(
                r.get("tracking", {}).get("mlflow", {}).get("ok") is False for r in lines[stopped_at:]))

        deadline = time.monotonic() + 180  # a hang guard
        while not flagged_after_the_kill():
            assert time.monotonic() < deadline, "a hang guard: no results line said MLflow was unavailable"
            time.sleep(0.5)
        assert process.poll() is None, "the run ended when its tracking server went away"
        process.send_signal(signal.SIGTERM)
        code, out, err = finished(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 143, err  # stopped by the SIGTERM, after a final checkpoint: not failed by the dead server
    assert "Terminated: stopped by SIGTERM after a final checkpoint" in out + err
    lines = results(run_dir)
    last = lines[-1]["iteration"]
    assert stopped_at < last and [r["iteration"] for r in lines] == list(range(1, last + 1))
    assert "is unavailable" in err
    flagged = [r for r in lines if r.get("tracking", {}).get("mlflow", {}).get("ok") is False]
    assert flagged and "unavailable" in flagged[-1]["tracking"]["mlflow"]["problem"]
    assert (run_dir / "exports" / f"policy-{last:06d}.pt").exists()  # the rest of the run went on as usual
    # When the server went, in training time, and how long the run went on without it.
    report_figures("mlflow-server-killed-mid-run", killed_at_training_seconds=lines[stopped_at - 1]["timeSeconds"],
                   iterations_before=stopped_at, iterations=last, first_flagged_iteration=flagged[0]["iteration"])
