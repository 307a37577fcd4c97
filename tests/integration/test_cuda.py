"""The GPU learner, where a CUDA GPU is visible to torch: PPO, DQN, Ape-X, IMPALA, APPO and SAC train on CUDA
with pinned host memory, observations stay uint8 until they are on the GPU, in-process sampling runs its
policy on the GPU, and checkpoints written on the GPU restore on the CPU and the reverse. These run on a
machine with a GPU (`pytest -m cuda`; bench/gpu_check.sh runs them there without Ray, so the tests that
need Ray's actors skip where it is not installed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kuberl.api.hyperparams import ApexDQNParams
from kuberl.trainer.algorithms.apex import ApexDQNConfig, build_apex_learner
from kuberl.trainer.algorithms.appo import APPOConfig
from kuberl.trainer.algorithms.dqn import DQNConfig
from kuberl.trainer.algorithms.impala import IMPALAConfig
from kuberl.trainer.algorithms.ppo import PPOConfig
from kuberl.trainer.algorithms.sac import SACConfig
from kuberl.trainer.learning.device import to_device
from kuberl.trainer.replay.buffers import PrioritizedReplayBuffer
from kuberl.trainer.replay.nstep import TRANSITION_KEYS
from kuberl.trainer.sampling.envs import make_vector_env

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PIXELS = "kuberl_testing.pixel_env:PixelQuadrant-v0"
SMALL_CONV = {"conv": [[16, 4, 2], [32, 3, 2]], "hidden": [64]}


def _ppo(gpus: int, bf16: bool = False, **training) -> PPOConfig:
    config = (PPOConfig().environment(PIXELS).rollouts(workers=0, envs_per_worker=8, fragment_length=16)
              .training(lr=1e-3, gamma=0.5, minibatch_size=64, num_epochs=2, model=SMALL_CONV, **training)
              .debugging(seed=4))
    config.document["spec"]["learner"] = {"gpus": gpus, "bf16": bf16}
    config.document["spec"]["stop"] = {"iterations": 3}
    return config


def _dqn(gpus: int) -> DQNConfig:
    config = (DQNConfig().environment(PIXELS).rollouts(workers=0, envs_per_worker=4, fragment_length=16)
              .replay(capacity=2_000).training(learning_starts=64, train_batch_size=32, model=SMALL_CONV)
              .debugging(seed=4))
    config.document["spec"]["learner"] = {"gpus": gpus}
    config.document["spec"]["stop"] = {"iterations": 3}
    return config


def test_to_device_pins_and_keeps_uint8_on_the_gpu():
    frames = np.random.default_rng(0).integers(0, 256, (8, 4, 84, 84), dtype=np.uint8)
    tensors = to_device({"obs": frames, "rewards": np.ones(8, np.float32)}, torch.device("cuda"))
    assert tensors["obs"].device.type == "cuda" and tensors["obs"].dtype == torch.uint8
    assert torch.equal(tensors["obs"].cpu(), torch.from_numpy(frames))


def _trained_on_cuda_then_restored_on_the_cpu(make, tmp_path, iterations: int) -> tuple[dict, str]:
    """Train `make(1)` on CUDA, save, restore into `make(0)` on the CPU: its weights equal the GPU's bit for bit,
    and it trains on. Returns the GPU run's last result and a checkpoint the CPU run wrote."""
    algo = make(1).build()
    try:
        assert all(p.device.type == "cuda" for p in algo.model.parameters())
        for _ in range(iterations):
            result = algo.train()
        uri = algo.save(tmp_path / "gpu-run")
        gpu_state = {k: v.cpu() for k, v in algo.model.state_dict().items()}
    finally:
        algo.stop()
    cpu = make(0).build()
    try:
        cpu.restore(uri)
        for key, value in cpu.model.state_dict().items():
            assert value.device.type == "cpu" and torch.equal(value, gpu_state[key])
        cpu.train()
        back_uri = cpu.save(tmp_path / "cpu-run")
    finally:
        cpu.stop()
    return result, back_uri


def test_ppo_trains_on_cuda_and_its_checkpoint_restores_on_the_cpu(tmp_path):
    result, back_uri = _trained_on_cuda_then_restored_on_the_cpu(_ppo, tmp_path, iterations=3)
    assert np.isfinite(result["learner"]["policyLoss"])
    gpu = _ppo(1).build()
    try:
        gpu.restore(back_uri)  # and the reverse: written on the CPU, restored onto the GPU
        assert all(p.device.type == "cuda" for p in gpu.model.parameters())
        gpu.train()
    finally:
        gpu.stop()


def test_ppo_trains_under_bf16_autocast_when_asked():
    algo = _ppo(1, bf16=True).build()
    try:
        assert algo.spec.learner.bf16
        result = algo.train()
        assert np.isfinite(result["learner"]["policyLoss"])
        assert all(p.dtype == torch.float32 for p in algo.model.parameters())  # weights stay float32
    finally:
        algo.stop()


def test_appo_trains_on_cuda_under_bf16_autocast_when_asked():
    config = (APPOConfig().environment(PIXELS).rollouts(workers=0, envs_per_worker=8, fragment_length=16)
              .training(lr=1e-3, gamma=0.5, train_batch_size=128, model=SMALL_CONV).debugging(seed=4))
    config.document["spec"]["learner"] = {"gpus": 1, "bf16": True}
    algo = config.build()
    try:
        assert next(algo.model.parameters()).device.type == "cuda"
        result = algo.train()
        assert result["learner"]["updates"] > 0 and np.isfinite(result["learner"]["policyLoss"])
        assert all(p.dtype == torch.float32 for p in algo.model.parameters())  # weights stay float32
    finally:
        algo.stop()


def test_dqn_trains_its_conv_q_network_on_cuda_and_restores_on_the_cpu(tmp_path):
    algo = _dqn(1).build()
    try:
        assert next(algo.learner.online.parameters()).device.type == "cuda"
        for _ in range(3):
            result = algo.train()
        assert result["learner"]["updates"] > 0 and result["learner"]["device"].startswith("cuda")
        uri = algo.save(tmp_path / "run")
    finally:
        algo.stop()
    cpu = _dqn(0).build()
    try:
        cpu.restore(uri)
        assert next(cpu.learner.online.parameters()).device.type == "cpu"
        assert cpu.learner.updates == result["learner"]["updates"]
    finally:
        cpu.stop()


def test_in_process_ppo_samples_with_its_policy_on_the_gpu():
    algo = _ppo(1).build()
    try:
        policy = algo.sampler.local_worker.policy
        assert next(policy.actor.parameters()).device.type == "cuda"
        result = algo.train()
        assert result["timesteps"] == 8 * 16
        for key, value in algo.model.actor.state_dict().items():  # the synced weights are the learner's
            assert torch.equal(policy.actor.state_dict()[key], value)
        factory, _weights = algo.evaluation_policy()
        assert factory.device == "cpu"  # evaluation actors act on their own CPUs
        actions = algo.sampler.local_worker.sample().data["actions"]
        assert actions.dtype == np.int64 and actions.min() >= 0 and actions.max() < 4
    finally:
        algo.stop()


def test_impala_trains_on_cuda_and_its_checkpoint_restores_on_the_cpu(tmp_path):
    def impala(gpus: int) -> IMPALAConfig:
        config = (IMPALAConfig().environment(PIXELS).rollouts(workers=0, envs_per_worker=8, fragment_length=16)
                  .training(lr=1e-3, gamma=0.5, train_batch_size=128, model=SMALL_CONV).debugging(seed=4))
        config.document["spec"]["learner"] = {"gpus": gpus}
        return config

    result, _ = _trained_on_cuda_then_restored_on_the_cpu(impala, tmp_path, iterations=2)
    assert result["learner"]["updates"] > 0 and np.isfinite(result["learner"]["policyLoss"])


def test_sac_trains_on_cuda_under_bf16_and_restores_on_the_cpu(tmp_path):
    def sac(gpus: int) -> SACConfig:
        config = (SACConfig().environment("Pendulum-v1").rollouts(workers=0, envs_per_worker=4, fragment_length=25)
                  .training(hidden=[32], learning_starts=100, train_batch_size=32).debugging(seed=4))
        config.document["spec"]["learner"] = {"gpus": gpus, "bf16": bool(gpus)}
        return config

    algo = sac(1).build()
    try:
        assert next(algo.learner.actor.parameters()).device.type == "cuda"
        for _ in range(4):
            result = algo.train()
        assert result["learner"]["updates"] > 0 and np.isfinite(result["learner"]["alpha"])
        assert all(p.dtype == torch.float32 for p in algo.learner.actor.parameters())
        uri = algo.save(tmp_path / "run")
        updates = result["learner"]["updates"]
    finally:
        algo.stop()
    cpu = sac(0).build()
    try:
        cpu.restore(uri)
        assert next(cpu.learner.actor.parameters()).device.type == "cpu"
        assert cpu.learner.take_stats()["updates"] == updates
        cpu.train()
    finally:
        cpu.stop()


def test_apex_learner_trains_on_cuda_from_prioritized_replay_in_process():
    """Ape-X's learner (what its learner actor runs) on CUDA, fed by a prioritized buffer of real CartPole
    transitions; the TD errors it sends back re-prioritise the buffer."""
    env = make_vector_env("CartPole-v1", num_envs=8)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in TRANSITION_KEYS}
    for _ in range(64):
        action = rng.integers(0, 2, 8)
        next_obs, reward, terminated, _, _ = env.step(action)
        for key, value in zip(TRANSITION_KEYS, (obs, action, reward, next_obs, 0.99 * ~terminated), strict=True):
            rows[key].append(np.asarray(value))
        obs = next_obs
    env.close()
    replay = PrioritizedReplayBuffer(1_000, seed=0)
    replay.add({k: np.concatenate(v).astype(np.float32 if k != "action" else np.int64) for k, v in rows.items()})
    params = ApexDQNParams(train_batch_size=64, target_update_interval=10)
    learner = build_apex_learner(env.single_observation_space, env.single_action_space, params, torch.device("cuda"))
    for _ in range(20):
        batch = replay.sample(64, beta=0.4)
        td_errors = learner.update(batch)
        assert td_errors.shape == (64,) and np.isfinite(td_errors).all()
        replay.update_priorities(batch["ids"], td_errors)
    stats = learner.take_stats()
    assert stats["updates"] == 20 and stats["targetSyncs"] == 2 and stats["device"].startswith("cuda")


def test_apex_learner_actor_trains_on_cuda():
    pytest.importorskip("ray", reason="the learner actor is a Ray actor; bench/gpu_check.sh runs without Ray")
    config = (ApexDQNConfig().environment("CartPole-v1").rollouts(workers=1, envs_per_worker=8, fragment_length=32)
              .replay(shards=1, capacity=20_000).training(learning_starts=500, min_iteration_seconds=0.5)
              .debugging(seed=4))
    config.document["spec"]["learner"] = {"gpus": 1}
    config.document["spec"]["stop"] = {"iterations": 6}
    algo = config.build()
    try:
        result = {}
        for _ in range(6):
            result = algo.train()
            if result["learner"].get("updates"):
                break
        assert result["learner"]["updates"] > 0
        assert str(result["learner"]["device"]).startswith("cuda")
    finally:
        algo.stop()
