"""Exported policies act like `compute_single_action`, run without kuberl (onnxruntime, plain torch)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kuberl.cli import main
from kuberl.trainer.algorithms.appo import APPOConfig
from kuberl.trainer.algorithms.base import Algorithm
from kuberl.trainer.algorithms.dqn import DQNConfig
from kuberl.trainer.algorithms.ppo import PPOConfig
from kuberl.trainer.algorithms.sac import SACConfig
from kuberl.trainer.export.formats import METADATA_KEY, TORCHSCRIPT_EXTRA_FILE, write_export
from kuberl.trainer.models.encoders import ConvEncoder
from kuberl.trainer.sampling.envs import make_env

IMAGE_ENV = "kuberl_testing.pixel_env:PixelQuadrant-v0"  # 1x16x16 uint8 images, 4 actions
SMALL_CONV = {"conv": [[8, 4, 2], [16, 3, 2]], "hidden": [32]}

# What each runner imports: only these packages (and their own dependencies) are on its sys.path.
RUNNER_PACKAGES = {
    "onnx": ["onnxruntime", "numpy"],
    "torchscript": ["torch", "torchgen", "numpy", "typing_extensions", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
                    "fsspec", "filelock"],
}
RUNNERS = {
    "onnx": "import onnxruntime as ort\n"
            "actions = ort.InferenceSession(path).run(None, {'obs': obs})[0]\n",
    "torchscript": "import torch\n"
                   "actions = torch.jit.load(path)(torch.from_numpy(obs)).numpy()\n",
}
RUNNER = """
import importlib.util, json, sys
sys.path.insert(0, {packages!r})
assert importlib.util.find_spec('kuberl') is None, 'kuberl is importable'
import numpy as np
path, obs = {path!r}, np.load({obs!r})
{body}
print(json.dumps(actions.tolist()))
"""


def isolated_packages(tmp_path: Path, names: list[str]) -> Path:
    """A directory holding links to just these installed packages (numpy.libs and the like come along)."""
    target = tmp_path / "packages"
    target.mkdir(exist_ok=True)
    for name in names:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        for path in [source, *source.parent.glob(f"{name}.libs")]:
            link = target / path.name
            if not link.exists():
                link.symlink_to(path)
    return target


def run_without_kuberl(tmp_path: Path, fmt: str, path: Path, obs: np.ndarray) -> np.ndarray:
    """The file's actions, computed by `python -I -S` that can import only the runner's packages."""
    obs_file = tmp_path / "obs.npy"
    np.save(obs_file, obs)
    packages = isolated_packages(tmp_path, RUNNER_PACKAGES[fmt])
    code = RUNNER.format(packages=str(packages), path=str(path), obs=str(obs_file), body=RUNNERS[fmt])
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    return np.asarray(json.loads(done.stdout.strip().splitlines()[-1]))


def observations(algo: Algorithm, count: int = 48) -> np.ndarray:
    """Observations the env really produces (random actions), in its own dtype."""
    env = make_env(algo.spec.env.id, algo.spec.env.config)
    rng = np.random.default_rng(3)
    found, (obs, _) = [], env.reset(seed=5)
    while len(found) < count:
        found.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.stack(found).astype(algo.observation_space.dtype)


def trained(config, iterations: int = 3) -> Algorithm:
    algo = config.debugging(seed=11).build()
    for _ in range(iterations):
        algo.train()
    return algo


CASES = {
    "ppo-cartpole": lambda: PPOConfig().environment("CartPole-v1").training(observation_filter="mean_std")
    .rollouts(envs_per_worker=4, fragment_length=32),
    "dqn-cartpole": lambda: DQNConfig().environment("CartPole-v1").training(observation_filter="mean_std",
                                                                             learning_starts=64)
    .rollouts(envs_per_worker=4, fragment_length=32),
    "dqn-pixels": lambda: DQNConfig().environment(IMAGE_ENV).training(learning_starts=32, model=SMALL_CONV)
    .rollouts(envs_per_worker=4, fragment_length=16),
    "appo-cartpole": lambda: APPOConfig().environment("CartPole-v1")
    .training(observation_filter="mean_std", min_iteration_seconds=0.5)
    .rollouts(workers=1, envs_per_worker=4, fragment_length=32),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_exported_policy_acts_like_compute_single_action_without_kuberl(tmp_path: Path, case: str, fmt: str) -> None:
    algo = trained(CASES[case]())
    try:
        obs = observations(algo)
        expected = np.array([algo.compute_single_action(o) for o in obs])
        path = tmp_path / f"policy.{fmt}"
        write_export(algo, fmt, path)
        filtered = algo.obs_filter(obs.astype(np.float32), update=False)
    finally:
        algo.stop()
    actions = run_without_kuberl(tmp_path, fmt, path, obs)
    assert actions.shape == expected.shape
    assert np.array_equal(actions, expected), f"{int((actions != expected).sum())} of {len(obs)} actions differ"
    assert len(set(expected.tolist())) > 1 or case == "dqn-pixels"  # a policy that ignores its input proves little
    if case != "dqn-pixels":  # the filter is inside: raw observations differ from what the network sees
        assert not np.allclose(filtered, obs)


def test_image_observations_go_in_as_uint8(tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort

    algo = trained(CASES["dqn-pixels"](), iterations=2)
    try:
        assert any(isinstance(m, ConvEncoder) for m in algo.policy_module().modules())
        write_export(algo, "onnx", tmp_path / "policy.onnx")
    finally:
        algo.stop()
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"))
    (given,) = session.get_inputs()
    assert given.type == "tensor(uint8)" and given.shape[1:] == [1, 16, 16]
    meta = json.loads({p.key: p.value for p in onnx.load(str(tmp_path / "policy.onnx")).metadata_props}[METADATA_KEY])
    assert meta["input"]["dtype"] == "uint8" and meta["output"]["action"] == {"type": "Discrete", "n": 4}


def test_continuous_actions_are_the_mean(tmp_path: Path) -> None:
    import torch

    algo = trained(PPOConfig().environment("Pendulum-v1").training(observation_filter="mean_std")
                   .rollouts(envs_per_worker=4, fragment_length=32), iterations=2)
    try:
        obs = np.stack([algo.observation_space.sample() for _ in range(32)])
        expected = np.stack([algo.compute_single_action(o) for o in obs])
        write_export(algo, "torchscript", tmp_path / "policy.pt")
    finally:
        algo.stop()
    extra = {TORCHSCRIPT_EXTRA_FILE: ""}
    loaded = torch.jit.load(str(tmp_path / "policy.pt"), _extra_files=extra)
    actions = loaded(torch.from_numpy(obs)).numpy()
    assert actions.shape == (32, 1)
    assert np.abs(actions - expected).max() < 1e-5
    assert json.loads(extra[TORCHSCRIPT_EXTRA_FILE])["output"]["action"]["type"] == "Box"


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_sac_exports_its_deterministic_action_scaled_to_the_box(tmp_path: Path, fmt: str) -> None:
    algo = trained(SACConfig().environment("Pendulum-v1").training(hidden=[32], learning_starts=64, train_batch_size=32)
                   .rollouts(envs_per_worker=4, fragment_length=32), iterations=2)
    try:
        obs = np.stack([algo.observation_space.sample() for _ in range(32)])
        expected = np.stack([algo.compute_single_action(o) for o in obs])
        path = tmp_path / f"policy.{fmt}"
        write_export(algo, fmt, path)
    finally:
        algo.stop()
    actions = run_without_kuberl(tmp_path, fmt, path, obs)
    assert actions.shape == expected.shape == (32, 1)
    assert np.abs(actions - expected).max() < 1e-5
    assert np.abs(actions).max() <= 2.0 and np.ptp(actions) > 0


MANIFEST = """\
apiVersion: kuberl.io/v1alpha1
kind: RLExperiment
metadata: {name: exp}
spec:
  algorithm: ppo
  env: {id: CartPole-v1}
  config: {seed: 3, observationFilter: mean_std}
  rollouts: {workers: 0, envsPerWorker: 4, fragmentLength: 32}
  stop: {iterations: 2}
  checkpoint: {everyIterations: 1, export: [onnx]}
"""


def test_kuberl_export_writes_a_checkpoint_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime as ort

    from kuberl.trainer.evaluation.checkpoint import load_algorithm

    (tmp_path / "exp.yaml").write_text(MANIFEST)
    run = tmp_path / "runs" / "exp"
    assert main(["train", "-f", str(tmp_path / "exp.yaml"), "--storage", f"file://{tmp_path / 'runs'}", "--quiet"]) == 0
    out = tmp_path / "exported.onnx"
    assert main(["export", str(run), "--format", "onnx", "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    algo, info = load_algorithm(str(run))
    try:
        obs = observations(algo, 32)
        expected = np.array([algo.compute_single_action(o) for o in obs])
    finally:
        algo.stop()
    assert info.iteration == 2
    for path in (out, run / "exports" / "policy-000002.onnx"):  # by hand, and by checkpoint.export
        actions = ort.InferenceSession(str(path)).run(None, {"obs": obs.astype(np.float32)})[0]
        assert np.array_equal(actions, expected), path


def test_kuberl_export_refuses_a_missing_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "nothing"), "--format", "onnx"]) == 2
    assert "error:" in capsys.readouterr().err
