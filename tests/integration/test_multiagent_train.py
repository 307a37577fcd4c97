"""`kuberl train` on PettingZoo envs: results with per-policy and per-agent returns, traces with agent ids,
checkpoints of every policy that resume, evaluate and export per policy; manifests whose mapping cannot work are
refused with exit 2 and the field named."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kuberl_testing.manifests import experiment_manifest, experiment_yaml

SPREAD = experiment_yaml("spread", """\
  algorithm: {algorithm}
  env: {{id: "mpe2:simple_spread_v3", config: {{N: 3, max_cycles: 25}}}}
  config: {{seed: 3}}
  rollouts: {{workers: 0, envsPerWorker: 4, fragmentLength: 25}}
  stop: {{iterations: {iterations}}}
  checkpoint: {{everyIterations: 1, keep: 2}}
  traces: {{steps: true}}
  evaluation: {{interval: 2, episodes: 2, video: {{everyEvaluations: 1}}}}
""")

SPEAKER_LISTENER = experiment_yaml("speaker-listener", """\
  algorithm: ppo
  env: {id: "mpe2:simple_speaker_listener_v4", config: {max_cycles: 25}}
  config: {seed: 1}
  rollouts: {workers: 0, envsPerWorker: 2, fragmentLength: 25}
  stop: {iterations: 2}
  checkpoint: {export: [onnx]}
  multiAgent:
    policies:
      - {name: speaker, agents: [speaker_0], config: {lr: 0.0005}}
      - {name: listener, agents: ["listener_*"], model: {hidden: [32, 32]}}
""")


def kuberl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def write(tmp_path: Path, text: str, name: str = "ma.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]


def test_shared_policy_trains_resumes_evaluates_and_exports(tmp_path: Path) -> None:
    proc = kuberl("train", "-f", write(tmp_path, SPREAD.format(algorithm="ppo", iterations=2)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| shared " in proc.stdout  # the progress line's per-policy return
    run = tmp_path / "kuberl-runs" / "spread"
    lines = results(run)
    last = lines[-1]
    assert last["timesteps"] == 2 * 4 * 25 and last["agentSteps"] == 4 * 25 * 3
    assert set(last["agents"]) == {"agent_0", "agent_1", "agent_2"}
    shared = last["policies"]["shared"]
    assert shared["learner"]["updates"] > 0 and shared["agentSteps"] == 300
    team = last["episodeReturnMean"]
    assert team == pytest.approx(sum(a["episodeReturnMean"] for a in last["agents"].values()), rel=1e-6)
    assert last["evaluation"]["episodes"] == 2
    videos = sorted((run / "videos").glob("*.mp4"))
    assert videos and videos[0].read_bytes()[4:8] == b"ftyp"  # an MP4 of the first evaluation episode

    traces = [json.loads(line) for f in sorted((run / "traces").glob("*.jsonl.gz"))
              for line in gzip.decompress(f.read_bytes()).decode().splitlines() if line]
    assert traces and set(traces[0]["agents"]) == {"agent_0", "agent_1", "agent_2"}
    assert {step["agent"] for step in traces[0]["steps"]} == {"agent_0", "agent_1", "agent_2"}

    accumulator = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    assert {"episodeReturnMean", "policies/shared/episodeReturnMean", "agents/agent_2/episodeReturnMean"} <= tags

    checkpoint = run / "checkpoints" / "000002"
    assert (checkpoint / "policies" / "shared" / "model.pt").is_file()
    resumed = kuberl("train", "-f", write(tmp_path, SPREAD.format(algorithm="ppo", iterations=3)), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    lines = results(run)
    assert lines[-1]["iteration"] == 3 and lines[-1]["policies"]["shared"]["learner"]["updatesTotal"] > \
        shared["learner"]["updatesTotal"]

    evaluated = kuberl("evaluate", str(run), "--episodes", "2", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "agents: agent_0" in evaluated.stdout
    exported = kuberl("export", str(run), "--format", "torchscript", "--policy", "shared", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "spread-000003-shared.pt").is_file()


def test_two_policies_each_learn_from_their_own_agents_and_restore(tmp_path: Path) -> None:
    proc = kuberl("train", "-f", write(tmp_path, SPEAKER_LISTENER), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "kuberl-runs" / "speaker-listener"
    last = results(run)[-1]
    assert set(last["policies"]) == {"speaker", "listener"}
    assert last["policies"]["speaker"]["learner"]["lr"] == 0.0005
    assert last["policies"]["speaker"]["agentSteps"] == last["policies"]["listener"]["agentSteps"] == 50
    checkpoint = run / "checkpoints" / "000002"
    for name in ("speaker", "listener"):
        assert (checkpoint / "policies" / name / "model.pt").is_file()
    exports = {p.name for p in (run / "exports").iterdir()}
    assert {"policy-000002-speaker.onnx", "policy-000002-listener.onnx"} <= exports  # with every checkpoint
    exported = kuberl("export", str(run), "--format", "onnx", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert {p.name for p in tmp_path.glob("*.onnx")} == {"speaker-listener-000002-speaker.onnx",
                                                          "speaker-listener-000002-listener.onnx"}
    renamed = SPEAKER_LISTENER.replace("name: listener,", "name: hearer,").replace("iterations: 2", "iterations: 3")
    refused = kuberl("train", "-f", write(tmp_path, renamed, "renamed.yaml"), cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "spec.multiAgent.policies: " in refused.stderr and "hearer is not among them" in refused.stderr


@pytest.mark.parametrize(("multi_agent", "field", "words"), [
    ("{policies: [{name: speaker, agents: [speaker_0]}]}", "spec.multiAgent.policies", "'listener_0'"),
    ("{policies: [{name: all, agents: ['*']}]}", "spec.multiAgent.policies[0].agents", "spaces differ"),
    ("{policies: [{name: speaker, agents: [speaker_0]}, {name: listener, agents: [listener_0]}], "
     "policiesToTrain: [talker]}", "spec.multiAgent.policiesToTrain[0]", "no policy is named 'talker'"),
])
def test_mappings_that_cannot_work_are_refused_with_the_field(tmp_path: Path, multi_agent: str, field: str,
                                                              words: str) -> None:
    text = SPEAKER_LISTENER.split("  multiAgent:")[0] + f"  multiAgent: {multi_agent}\n"
    for command in ("validate", "train"):
        proc = kuberl(command, "-f", write(tmp_path, text), cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        line = next(line for line in proc.stderr.splitlines() if f"{field}: " in line)
        assert words in line


RELAY_EVALUATED = experiment_manifest(
    "relay-evaluated", env="kuberl_testing.multi_agent_envs:relay_env", seed=1, stop={"iterations": 6},
    evaluation={"interval": 2, "episodes": 4, "workers": 2})


def test_evaluation_actors_play_every_policy_while_training_goes_on(tmp_path: Path) -> None:
    proc = kuberl("train", "-f", write(tmp_path, RELAY_EVALUATED), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    evaluations = [r["evaluation"] for r in results(tmp_path / "kuberl-runs" / "relay-evaluated") if "evaluation" in r]
    assert evaluations and all(e["episodes"] == 4 for e in evaluations)
    assert all(e["lengthMean"] == 8 for e in evaluations)  # RelayEnv's episodes: every agent gone after 8 steps
    assert all(0 <= r <= 17 for e in evaluations for r in e["returns"])
