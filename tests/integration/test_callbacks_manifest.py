"""spec.callbacks: a Callbacks subclass named in the manifest, imported by `kuberl train`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MANIFEST = """\
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {{name: called-back}}
spec:
  algorithm: ppo
  env: {{id: CartPole-v1}}
  config: {{seed: 2}}
  rollouts: {{workers: 0, envsPerWorker: 2, fragmentLength: 32}}
  stop: {{iterations: 3}}
  checkpoint: {{everyIterations: 2, keep: 5}}
  evaluation: {{interval: 2, episodes: 2}}
  callbacks: {callbacks}
"""

RECORDER = '''
import json, os
from kuberl.trainer.run.callbacks import Callbacks


def _write(hook, **values):
    with open(os.environ["CALLBACKS_OUT"], "a") as fh:
        fh.write(json.dumps({"hook": hook, **values}) + "\\n")


class Recorder(Callbacks):
    def on_episode_end(self, *, algorithm, episode):
        _write("on_episode_end", algorithm=type(algorithm).__name__, episode=sorted(episode))

    def on_train_result(self, *, algorithm, result):
        _write("on_train_result", algorithm=type(algorithm).__name__, iteration=result["iteration"],
               keys=sorted(result))

    def on_evaluation_result(self, *, algorithm, evaluation):
        _write("on_evaluation_result", algorithm=type(algorithm).__name__, evaluation=evaluation)

    def on_checkpoint_written(self, *, algorithm, checkpoint):
        _write("on_checkpoint_written", algorithm=type(algorithm).__name__, checkpoint=checkpoint)


class NotCallbacks:
    pass
'''

EPISODE_KEYS = {"experiment", "worker", "episode", "env", "return", "length", "policyVersion", "startTime", "endTime"}


def train(tmp_path: Path, callbacks: str) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "user_hooks.py").write_text(RECORDER)
    manifest = tmp_path / "experiment.yaml"
    manifest.write_text(MANIFEST.format(callbacks=callbacks))
    out = tmp_path / "calls.jsonl"
    env = {**os.environ, "CALLBACKS_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "kuberl.cli", "train", "-f", str(manifest), "--storage",
                           f"file://{tmp_path}/runs"], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    return proc, out


def test_callbacks_from_the_manifest_get_the_documented_arguments(tmp_path):
    proc, out = train(tmp_path, "user_hooks:Recorder")
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in out.read_text().splitlines()]
    by_hook: dict[str, list[dict]] = {}
    for call in calls:
        by_hook.setdefault(call["hook"], []).append(call)
    assert {call["algorithm"] for call in calls} == {"PPO"}
    assert [c["iteration"] for c in by_hook["on_train_result"]] == [1, 2, 3]
    assert {"iteration", "timesteps", "episodes", "episodeReturnMean"} <= set(by_hook["on_train_result"][0]["keys"])
    assert by_hook["on_episode_end"] and all(set(c["episode"]) >= EPISODE_KEYS for c in by_hook["on_episode_end"])
    evaluations = [c["evaluation"] for c in by_hook["on_evaluation_result"]]
    assert [e["iteration"] for e in evaluations] == [2, 3]
    assert all({"iteration", "timesteps", "episodes", "returnMean", "returnStd", "lengthMean"} <= set(e)
               for e in evaluations)
    checkpoints = [c["checkpoint"] for c in by_hook["on_checkpoint_written"]]
    assert [c["iteration"] for c in checkpoints] == [2, 3]
    run = tmp_path / "runs" / "called-back"
    assert checkpoints[-1]["uri"] == (run / "checkpoints" / "000003").as_uri()
    assert all(set(c) == {"uri", "iteration", "timesteps"} for c in checkpoints)


@pytest.mark.parametrize(("callbacks", "why"), [
    ("no_such_module:Recorder", "cannot import module 'no_such_module'"),
    ("user_hooks:Missing", "has no attribute 'Missing'"),
    ("user_hooks:NotCallbacks", "NotCallbacks is not a kuberl.trainer.run.callbacks.Callbacks subclass"),
])
def test_a_bad_callbacks_class_exits_2_naming_spec_callbacks(tmp_path, callbacks, why):
    proc, out = train(tmp_path, callbacks)
    assert proc.returncode == 2
    assert "spec.callbacks" in proc.stderr and why in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
