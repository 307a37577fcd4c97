"""`kuberl sweep` on this machine: trials as `kuberl train` processes, pruning, the summary, the JSON line,
continuing after an interruption, PBT's exploit step, and bad input (exit 2, field named)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberl.api.sweep_types import TrialState
from kuberl.sweep.search import SweepState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TEMPLATE = {
    "algorithm": "ppo",
    "env": {"id": "CartPole-v1"},
    "config": {"seed": 1},
    "rollouts": {"workers": 0, "envsPerWorker": 4, "fragmentLength": 64},
    "checkpoint": {"everyIterations": 2},
}


def sweep_file(tmp_path: Path, name: str, timesteps: int = 2000, **spec: Any) -> Path:
    template = {**TEMPLATE, "stop": {"timesteps": timesteps}}
    body = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": name},
            "spec": {"template": template, "parameters": [
                {"path": "config.lr", "type": "float", "low": 0.0001, "high": 0.003, "log": True},
                {"path": "config.entropyCoeff", "type": "categorical", "values": [0.0, 0.01]}], **spec}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def kuberl(*args: str, cwd: Path, timeout: float = 500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def last_json(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_sweep_runs_prunes_and_summarises(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, "tiny", search={"algorithm": "random", "seed": 1}, maxTrials=3, parallelism=2,
                      earlyStopping={"algorithm": "median", "interval": 500, "startupTrials": 1})
    proc = kuberl("sweep", "-f", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = last_json(proc.stdout)
    assert line["trials"] == 3 and line["failed"] == 0
    assert set(line["best"]) == {"trial", "params", "value"} and line["best"]["trial"].startswith("tiny-t")
    assert "trial  state" in proc.stdout  # the table
    directory = tmp_path / "kuberl-sweeps" / "tiny"
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["phase"] == "Succeeded" and len(summary["trialRecords"]) == 3
    assert (directory / "summary.png").stat().st_size > 1000
    state = SweepState.model_validate_json((directory / "state.json").read_text())
    for trial in state.trials:  # every trial ran in its own run directory, with its own parameters
        run = yaml.safe_load((directory / "runs" / f"{trial.name}.yaml").read_text())
        assert run["spec"]["config"]["lr"] == trial.params["config.lr"]
        assert (directory / "runs" / trial.name / "results.jsonl").exists()
        assert trial.state in (TrialState.SUCCEEDED, TrialState.PRUNED)
    # The seeds make the runs repeat: trial 2 (lr 3e-4, below the others) lags the finished trials.
    assert line["pruned"] == sum(t.state == TrialState.PRUNED for t in state.trials) >= 1
    for trial in state.trials:
        if trial.state == TrialState.PRUNED:  # decided on an intermediate value, at the latest the budget's
            # (a run this tiny may reach its budget before the SIGTERM lands, or before the sweep reads its
            # results on a loaded machine: the decision is what counts)
            step = int(trial.intermediate[-1][0])
            assert step <= 2000 and f"pruned at {step:,} steps (median)" == trial.message
            assert trial.value == trial.intermediate[-1][1]


def test_an_interrupted_sweep_continues_without_duplicate_trials(tmp_path: Path) -> None:
    # Trials long enough that the interrupt lands while the second one runs: 48 iterations, 4.4 s of training each
    # with the machine busy (load about 10), and the interrupt came in the second trial's 2nd iteration. They had
    # 30,000 steps (117 iterations); the sweep's and the trials' process starts are most of the test's time.
    path = sweep_file(tmp_path, "again", timesteps=12_288, search={"algorithm": "tpe", "seed": 2, "startupTrials": 1},
                      maxTrials=3, parallelism=1)
    directory = tmp_path / "kuberl-sweeps" / "again"
    # SIGINT restored to its default in the child: a shell without job control starts its background commands
    # (`make test &`) with SIGINT ignored, and Python would then inherit that and never see the Ctrl-C.
    proc = subprocess.Popen([sys.executable, "-m", "kuberl.cli", "sweep", "-f", str(path)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # interrupt once the second trial runs
            if (directory / "state.json").exists():
                state = SweepState.model_validate_json((directory / "state.json").read_text())
                if len(state.trials) == 2 and (directory / "runs" / "again-t001" / "results.jsonl").exists():
                    break
            time.sleep(0.3)
        else:
            pytest.fail("the second trial never started")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the sweep and its trials
        assert proc.wait(timeout=120) == 130, proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    interrupted = SweepState.model_validate_json((directory / "state.json").read_text())
    assert [t.state for t in interrupted.trials] == [TrialState.SUCCEEDED, TrialState.RUNNING]

    again = kuberl("sweep", "-f", str(path), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "continuing the sweep" in again.stdout
    final = SweepState.model_validate_json((directory / "state.json").read_text())
    assert [t.name for t in final.trials] == ["again-t000", "again-t001", "again-t002"]
    assert [t.params for t in final.trials[:2]] == [t.params for t in interrupted.trials]
    log = (directory / "runs" / "again-t001.log").read_text()
    assert "resuming from" in log  # the interrupted trial went on from its own checkpoint
    assert last_json(again.stdout)["trials"] == 3


def test_pbt_copies_a_leaders_checkpoint_and_learning_continues(tmp_path: Path) -> None:
    template = {**TEMPLATE, "stop": {"timesteps": 1536}, "rollouts": {"workers": 0, "envsPerWorker": 4,
                                                                      "fragmentLength": 64}}
    body = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLSweep", "metadata": {"name": "pop"},
            "spec": {"template": template,
                     "parameters": [{"path": "config.lr", "type": "float", "low": 0.00001, "high": 0.01,
                                     "log": True}],
                     "search": {"algorithm": "pbt", "seed": 1,
                                "pbt": {"populationSize": 2, "perturbationInterval": 768, "quantileFraction": 0.5,
                                        "resampleProbability": 0.0}},
                     "parallelism": 2}}
    path = tmp_path / "pop.yaml"
    path.write_text(yaml.safe_dump(body))
    proc = kuberl("sweep", "-f", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pbt round 1 at 768 steps" in proc.stdout
    directory = tmp_path / "kuberl-sweeps" / "pop"
    state = SweepState.model_validate_json((directory / "state.json").read_text())
    assert state.pbt_round == 1 and all(t.state == TrialState.SUCCEEDED for t in state.trials)
    first = {t.number: yaml.safe_load((directory / "runs" / f"{t.name}-r00.yaml").read_text()) for t in state.trials}
    second = {t.number: yaml.safe_load((directory / "runs" / f"{t.name}-r01.yaml").read_text())
              for t in state.trials}
    round0 = {t.number: t.intermediate[0][1] for t in state.trials}
    leader = max(round0, key=round0.get)
    lagger = 1 - leader
    # The lagging member continued from the leader's checkpoint with the leader's lr times 0.8 or 1.2.
    source = second[lagger]["spec"]["checkpoint"]["restoreFrom"]
    assert f"/pop-t{leader:03d}-r00/checkpoints/" in source
    leader_lr = first[leader]["spec"]["config"]["lr"]
    assert second[lagger]["spec"]["config"]["lr"] == pytest.approx(leader_lr * 0.8) or \
        second[lagger]["spec"]["config"]["lr"] == pytest.approx(leader_lr * 1.2)
    assert f"/pop-t{leader:03d}-r00/checkpoints/" in second[leader]["spec"]["checkpoint"]["restoreFrom"]
    # Learning continued: the second segment's counters go on from the copied checkpoint's.
    results = [json.loads(x) for x in (directory / "runs" / f"pop-t{lagger:03d}-r01" / "results.jsonl")
               .read_text().splitlines()]
    assert results[0]["timesteps"] > 768 and results[-1]["timesteps"] >= 1536
    assert "starting from" in (directory / "runs" / f"pop-t{lagger:03d}-r01.log").read_text()
    assert last_json(proc.stdout)["trials"] == 2
    # Each member and round ran with a seed of its own, recorded in the state and in each run's manifest.
    seeds = {t.number: t.seeds for t in state.trials}
    assert seeds == {n: [first[n]["spec"]["config"]["seed"], second[n]["spec"]["config"]["seed"]] for n in seeds}
    assert len({seed for pair in seeds.values() for seed in pair}) == 4
    # The leader kept its lr: its rate fell once over both rounds (annealed over the sweep's 1,536 steps).
    assert first[leader]["spec"]["config"]["annealTimesteps"] == 1536
    rates = [json.loads(line)["learner"]["lr"] for name in (f"pop-t{leader:03d}-r00", f"pop-t{leader:03d}-r01")
             for line in (directory / "runs" / name / "results.jsonl").read_text().splitlines()]
    assert rates == sorted(rates, reverse=True) and rates[-1] < 0.2 * rates[0]


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_bad_sweeps_exit_2_naming_the_field(tmp_path: Path, command: str) -> None:
    path = sweep_file(tmp_path, "bad", maxTrials=3)
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["parameters"][0]["path"] = "config.lrr"
    doc["spec"]["parallelism"] = 0
    path.write_text(yaml.safe_dump(doc))
    proc = kuberl(command, "-f", str(path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error: spec.parallelism: must be >= 1" in proc.stderr


def test_validate_accepts_a_sweep_and_its_cluster_checks(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, "good", maxTrials=3)
    proc = kuberl("validate", "-f", str(path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "valid tpe sweep 'good' of 2 parameters over ppo on CartPole-v1" in proc.stdout
    proc = kuberl("validate", "--cluster", "-f", str(path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "error: spec.template.storage.uri: required in a cluster" in proc.stderr
