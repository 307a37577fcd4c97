"""`kuberl` as a user runs it: bad input exits 2 with the field named and no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOOD = textwrap.dedent(
    """\
    apiVersion: kuberl.io/v1alpha1
    kind: RLExperiment
    metadata: {name: cli-test}
    spec:
      algorithm: ppo
      env: {id: CartPole-v1}
      stop: {timesteps: 1000}
    """
)


def kuberl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kuberl.cli", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "experiment.yaml"
    path.write_text(text)
    return str(path)


def assert_refused(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


CASES = {
    "typo": (GOOD + "  rolouts: {workers: 1}\n", ["error: spec.rolouts: unknown field (did you mean 'rollouts'?)"]),
    "bad-yaml": (GOOD.replace("algorithm: ppo", "algorithm: ppo: x"), ["invalid YAML at line 5"]),
    "api-version": (GOOD.replace("v1alpha1", "v2"), ["error: apiVersion: must be 'kuberl.io/v1alpha1'"]),
    "kind": (GOOD.replace("kind: RLExperiment", "kind: Pod"), ["error: kind: must be 'RLExperiment'"]),
    "algorithm": (GOOD.replace("algorithm: ppo", "algorithm: sacc"), ["error: spec.algorithm: must be one of"]),
    "range": (GOOD + "  rollouts: {workers: -1}\n", ["error: spec.rollouts.workers: must be >= 0"]),
    "unknown-env": (GOOD.replace("CartPole-v1", "CartPoel-v1"), ["error: spec.env.id:", "CartPoel-v1"]),
    "bad-module": (GOOD.replace("CartPole-v1", "no_such_pkg.envs:Thing"), ["error: spec.env.id:", "no_such_pkg"]),
    "dqn-continuous": (
        GOOD.replace("algorithm: ppo", "algorithm: dqn").replace("CartPole-v1", "Pendulum-v1"),
        ["error: spec.algorithm:", "dqn needs Discrete actions", "Pendulum-v1"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_refuses_bad_input(tmp_path, case):
    text, fragments = CASES[case]
    assert_refused(kuberl("validate", "-f", write(tmp_path, text)), *fragments)


def test_train_refuses_before_starting_anything(tmp_path):
    text, fragments = CASES["unknown-env"]
    proc = kuberl("train", "-f", write(tmp_path, text), "--storage", f"file://{tmp_path}/runs")
    assert_refused(proc, *fragments)
    assert not (tmp_path / "runs").exists(), "nothing may be written for a refused manifest"


def test_three_mistakes_in_three_sections_are_three_errors_in_one_run(tmp_path):
    text = GOOD.replace("stop: {timesteps: 1000}", "stop: {timestep: 1000}") + "  rolouts: {workers: 0}\n" \
        + "  config: {lrr: 0.001}\n"
    proc = kuberl("validate", "-f", write(tmp_path, text))
    assert_refused(proc, "error: spec.rolouts: unknown field (did you mean 'rollouts'?)",
                   "error: spec.stop.timestep: unknown field (did you mean 'timesteps'?)",
                   "error: spec.config.lrr: unknown field (did you mean 'lr'?)")
    assert len(proc.stderr.splitlines()) == 3, proc.stderr


@pytest.mark.parametrize("command", ["validate", "train", "submit"])
def test_a_python_field_name_never_passes_for_the_manifests(tmp_path, command):
    text = GOOD + "  rollouts: {envs_per_worker: 4}\n  config: {entropy_coeff: 0.01}\n" \
        + "  storage: {uri: 's3://bucket/runs'}\n"
    extra = {"train": ["--storage", f"file://{tmp_path}/runs"], "submit": ["--dry-run"]}.get(command, [])
    proc = kuberl(command, "-f", write(tmp_path, text), *extra, cwd=tmp_path)
    assert_refused(proc, "error: spec.rollouts.envs_per_worker: unknown field (did you mean 'envsPerWorker'?)",
                   "error: spec.config.entropy_coeff: unknown field (did you mean 'entropyCoeff'?)")
    assert not (tmp_path / "runs").exists()


SWEEP = textwrap.dedent(
    """\
    apiVersion: kuberl.io/v1alpha1
    kind: RLSweep
    metadata: {name: cli-sweep}
    spec:
      template:
        algorithm: ppo
        env: {id: CartPole-v1}
        stop: {timesteps: 1000}
      objective: {metric: episodeReturnMaen}
      parameters:
      - {path: stop.timesteps, type: int, low: 100, high: 200}
    """
)


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_a_sweep_names_its_path_and_objective_mistakes_before_any_trial(tmp_path, command):
    proc = kuberl(command, "-f", write(tmp_path, SWEEP), cwd=tmp_path)
    assert_refused(proc, "error: spec.parameters[0].path: 'stop.timesteps' is not a path a sweep can set",
                   "error: spec.objective.metric: 'episodeReturnMaen' is not a result that ppo reports (did you "
                   "mean 'episodeReturnMean'?)")
    assert "must match the pattern" not in proc.stderr
    assert not list(tmp_path.glob("kuberl-runs*")), "no trial may start"


def test_set_override_errors_name_the_field(tmp_path):
    proc = kuberl("validate", "-f", write(tmp_path, GOOD), "--set", "rollouts.envsPerWorker=0")
    assert_refused(proc, "error: spec.rollouts.envsPerWorker: must be >= 1")


def test_missing_file(tmp_path):
    assert_refused(kuberl("validate", "-f", str(tmp_path / "nope.yaml")), "nope.yaml: no such file")


def test_valid_manifest(tmp_path):
    proc = kuberl("validate", "-f", write(tmp_path, GOOD))
    assert proc.returncode == 0, proc.stderr
    assert "valid ppo experiment 'cli-test' on CartPole-v1" in proc.stdout


def test_help_lists_the_commands():
    proc = kuberl("--help")
    assert proc.returncode == 0
    for command in ("train", "validate", "evaluate", "traces", "operator"):
        assert command in proc.stdout


@pytest.mark.parametrize(("storage", "message"), [
    ("s4://bucket/x", "unknown scheme 's4' in 's4://bucket/x' "
                      "(use s3://bucket/prefix, file:///path or a plain path)"),
    ("gs://bucket/x", "unknown scheme 'gs'"),
    ("S3://bucket/x", "the scheme must be lowercase: s3://"),
    ("s3:/bucket/x", "'s3:/bucket/x' needs '//' after 's3:'"),
    ("file:/x", "'file:/x' needs '//' after 'file:'"),
    ("s3://Bad_Bucket/x", "'Bad_Bucket' is not an S3 bucket name"),
])
def test_train_refuses_a_storage_it_cannot_use_before_training(tmp_path, monkeypatch, storage, message):
    monkeypatch.setenv("KUBERL_STORAGE_RETRY_SECONDS", "1")  # a store that is never reached is not waited for
    proc = kuberl("train", "-f", write(tmp_path, GOOD), "--storage", storage, cwd=tmp_path)
    assert_refused(proc, f"error: --storage: {message}")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["experiment.yaml"], "nothing may be written"


def test_numbers_in_exponent_form_are_numbers(tmp_path):
    text = GOOD + "  config: {lr: 3e-4}\n"
    proc = kuberl("validate", "-f", write(tmp_path, text), "--set", "config.vfCoeff=5e-1",
                  "--skip-env-checks")
    assert proc.returncode == 0, proc.stderr
    proc = kuberl("validate", "-f", write(tmp_path, GOOD), "--set", "stop.timesteps=1e5", "--skip-env-checks")
    assert_refused(proc, "error: spec.stop.timesteps: must be a whole number written without a decimal "
                   "point or exponent, got 100000.0 (write 100000)")


def test_a_local_run_on_s3_without_credentials_says_where_they_come_from(tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    text = GOOD + "  storage: {uri: 's3://kuberl-runs/experiments', secretRef: {name: s3-credentials}}\n"
    proc = kuberl("train", "-f", write(tmp_path, text), cwd=tmp_path)
    assert_refused(proc, "error: storage s3://kuberl-runs/experiments/cli-test",
                   "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                   "(spec.storage.secretRef is read only in a cluster); or train into a local directory with "
                   "--storage PATH")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_a_module_of_ones_own_that_is_not_found_may_need_pythonpath(tmp_path):
    text = GOOD.replace("CartPole-v1", "custom_env.corridor:CorridorEnv")
    proc = kuberl("validate", "-f", write(tmp_path, text), cwd=tmp_path)
    assert_refused(proc, "error: spec.env.id:", "(No module named 'custom_env'): install custom_env, or put "
                   "the folder that holds custom_env on PYTHONPATH")
