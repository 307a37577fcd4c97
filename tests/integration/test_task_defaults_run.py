"""A manifest with only algorithm, env.id, seed and a stop trains with its task kind's defaults: `kuberl train`
says which, the first results line records them, and the run's experiment.yaml holds what was trained."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from kuberl.api.validation import load_manifest
from kuberl.trainer.run.driver import TrainOptions, run_training
from kuberl_testing.manifests import experiment_yaml

MANIFEST = experiment_yaml("{name}", """\
  algorithm: ppo
  env: {{id: {env}}}
  config: {{seed: 3{config}}}
  stop: {{iterations: 1, timesteps: 100000}}
""")


def train(tmp_path: Path, name: str, env: str, config: str = "") -> tuple[list[str], dict, dict]:
    out = io.StringIO()
    summary = run_training(load_manifest(MANIFEST.format(name=name, env=env, config=config)),
                           TrainOptions(storage_uri=f"file://{tmp_path}", quiet=True, out=out))
    assert summary.result == "Succeeded", out.getvalue()
    run = tmp_path / name
    first = json.loads((run / "results.jsonl").read_text().splitlines()[0])
    spec = yaml.safe_load((run / "experiment.yaml").read_text())["spec"]
    return out.getvalue().splitlines(), first, spec


def test_a_continuous_control_manifest_trains_with_the_continuous_defaults(tmp_path):
    lines, first, spec = train(tmp_path, "cheetah-like", "Pendulum-v1", config=", lr: 0.001")
    at = next(i for i, line in enumerate(lines) if line.startswith("training ppo on Pendulum-v1"))
    assert lines[at + 1].startswith("using the continuous-control defaults for ppo: annealLr=true, numEpochs=10,")
    assert "lr=" not in lines[at + 1].split(":", 1)[1].replace("annealLr", "")  # the manifest's lr is not listed
    assert first["timesteps"] == 2048  # 8 envs x 256 steps: CleanRL's 2,048 per update
    assert first["defaults"]["kind"] == "continuous-vector"
    assert first["defaults"]["values"]["config.observationFilter"] == "mean_std"
    assert first["defaults"]["values"]["config.normalizeRewards"] is True
    assert first["episodeReturnMean"] < -100  # the rewards the learner scales; the returns reported stay raw
    assert spec["config"]["lr"] == 0.001 and spec["config"]["numEpochs"] == 10
    assert spec["rollouts"]["fragmentLength"] == 256 and spec["config"]["observationFilter"] == "mean_std"


def test_cartpole_keeps_the_defaults_it_learns_with(tmp_path):
    lines, first, spec = train(tmp_path, "pole", "CartPole-v1")
    assert any(line.startswith("using the discrete-control defaults for ppo: lr=0.002, numEpochs=8,")
               for line in lines)
    assert first["defaults"]["kind"] == "discrete-vector"
    assert spec["rollouts"] == {**spec["rollouts"], "envsPerWorker": 8, "fragmentLength": 64}


PIXELS = experiment_yaml("pixels-{algorithm}", """\
  algorithm: {algorithm}
  env: {{id: ALE/Pong-v5, preprocessing: atari}}
  rollouts: {{workers: {workers}}}
  config: {{seed: 1}}
  stop: {{iterations: 2}}
""")


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ppo", "dqn", "impala", "appo", "apex-dqn"])
def test_every_image_default_set_trains(tmp_path, algorithm):
    out = io.StringIO()
    workers = 1 if algorithm == "apex-dqn" else 0  # Ape-X samples only on rollout workers
    summary = run_training(load_manifest(PIXELS.format(algorithm=algorithm, workers=workers)),
                           TrainOptions(storage_uri=f"file://{tmp_path}", quiet=True, out=out))
    assert summary.result == "Succeeded", out.getvalue()
    first = json.loads((tmp_path / f"pixels-{algorithm}" / "results.jsonl").read_text().splitlines()[0])
    assert first["defaults"]["kind"] == "image" and first["defaults"]["values"]
    assert f"using the image defaults for {algorithm}: " in out.getvalue()
    if algorithm == "apex-dqn":  # the replay ratio the learner's measured speed allows, within its bounds
        samples = first["defaults"]["machine"]["replayedSamplesPerStep"]
        assert 0.25 <= samples <= 1.0
