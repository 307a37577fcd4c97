"""The learner's CPU settings from the manifest: bfloat16 autocast on the CPU, and torch's thread count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from kuberl.trainer.algorithms.ppo import PPOConfig
from kuberl.trainer.learning import device


@pytest.fixture
def threads_restored() -> Iterator[None]:
    before, chosen = torch.get_num_threads(), device._chosen_threads
    yield
    device._chosen_threads = chosen
    torch.set_num_threads(before)


def _bf16_image_ppo(seed: int) -> Any:
    """PPO on a small image task with a small conv encoder, its learner under bfloat16 autocast on the CPU."""
    return (PPOConfig().environment("kuberl_testing.image_envs:StackedBeacon", env_config={"size": 42, "max_steps": 8})
            .rollouts(workers=0, envs_per_worker=4, fragment_length=16)
            .training(model={"conv": [[8, 8, 4]], "hidden": [16]}, minibatch_size=32, num_epochs=1)
            .resources(learner_bf16=True).debugging(seed=seed).build())


def test_bf16_autocasts_on_the_cpu_and_off_leaves_float32() -> None:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with device.learner_autocast(torch.device("cpu"), True):
        assert (a @ b).dtype == torch.bfloat16
    with device.learner_autocast(torch.device("cpu"), False):
        assert (a @ b).dtype == torch.float32


def test_ppo_with_learner_bf16_on_the_cpu_updates_its_conv_encoder_in_bfloat16_and_keeps_float32_weights() -> None:
    algo = _bf16_image_ppo(seed=3)
    try:
        seen: list[torch.dtype] = []
        encoder = algo.model.actor.net[0]  # the conv stack the policy and value heads share
        encoder.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype) if torch.is_grad_enabled() else None)
        before = [p.detach().clone() for p in algo.model.parameters()]
        result = algo.train()
        assert seen and set(seen) == {torch.bfloat16}  # the update's passes ran under autocast
        assert all(p.dtype == torch.float32 for p in algo.model.parameters())
        assert any(not torch.equal(a, p) for a, p in zip(before, algo.model.parameters(), strict=True))
        assert np.isfinite([result["learner"]["policyLoss"], result["learner"]["valueLoss"]]).all()
    finally:
        algo.stop()


@pytest.mark.usefixtures("threads_restored")
def test_spec_learner_threads_sets_torchs_threads_and_later_calls_in_that_process_keep_them(monkeypatch) -> None:
    monkeypatch.setenv("KUBERL_TORCH_THREADS", "1")
    device._chosen_threads = None
    assert device.configure_cpu_threads() == 1 and torch.get_num_threads() == 1
    assert device.configure_cpu_threads(2) == 2 and torch.get_num_threads() == 2
    # The sampling policy in the same process configures again without a count: the learner's choice stays.
    assert device.configure_cpu_threads() == 2 and torch.get_num_threads() == 2


@pytest.mark.usefixtures("threads_restored")
def test_an_algorithm_built_from_a_manifest_with_learner_threads_runs_on_that_many(monkeypatch) -> None:
    monkeypatch.delenv("KUBERL_TORCH_THREADS", raising=False)
    device._chosen_threads = None
    algo = PPOConfig().environment("CartPole-v1").resources(learner_threads=2).build()
    try:
        assert torch.get_num_threads() == 2
        algo.train()
        assert torch.get_num_threads() == 2
    finally:
        algo.stop()


def test_bf16_ppo_runs_its_heads_in_float32_and_takes_the_behaviour_log_probabilities_from_its_own_pass() -> None:
    algo = _bf16_image_ppo(seed=5)
    try:
        learner, model = algo.learner, algo.model
        dtypes: dict[str, set[torch.dtype]] = {"encoder": set(), "policy head": set(), "value head": set()}
        model.actor.net[0].register_forward_hook(lambda _m, _i, out: dtypes["encoder"].add(out.dtype))
        model.actor.net[1].register_forward_hook(lambda _m, _i, out: dtypes["policy head"].add(out.dtype))
        model.critic.register_forward_hook(lambda _m, _i, out: dtypes["value head"].add(out.dtype))
        batches = algo.collect()
        batch = learner.learner_batch(batches)
        with torch.no_grad():
            logp, _, _ = model.evaluate(batch["obs"], batch["actions"], learner._autocast)
        assert dtypes == {"encoder": {torch.bfloat16}, "policy head": {torch.float32}, "value head": {torch.float32}}
        # The ratio's denominator is the learner's own pass: the first minibatch's ratio is 1 up to rounding ...
        torch.testing.assert_close(batch["logp"], logp, atol=1e-5, rtol=0)
        # ... where the sampler's float32 log-probabilities differ from it by bfloat16's rounding (small here: a
        # fresh network's logits are near 0).
        sampled = np.concatenate([b.data["logp"][b.data["valid"]] for b in batches])
        assert not np.allclose(sampled, batch["logp"].numpy(), rtol=0, atol=1e-6)
    finally:
        algo.stop()


def test_bf16_q_learner_runs_its_body_under_autocast_and_its_dueling_heads_in_float32() -> None:
    from gymnasium import spaces

    from kuberl.api.hyperparams import DQNParams
    from kuberl.trainer.learners.q import QLearner
    from kuberl.trainer.models.encoders import EncoderSpec
    from kuberl.trainer.models.q_network import q_network

    obs_space, n = spaces.Box(0, 255, (4, 42, 42), np.uint8), 3
    network = q_network(obs_space, spaces.Discrete(n), EncoderSpec(conv=((8, 8, 4),), conv_hidden=(16,)), True)
    learner = QLearner(network, DQNParams(lr=0.01, double_q=True), torch.device("cpu"), bf16=True)
    dtypes: dict[str, list[torch.dtype]] = {"body": [], "heads": []}
    for net in (learner.online, learner.target):
        net.body.register_forward_hook(lambda _m, _i, out: dtypes["body"].append(out.dtype))
        for head in (net.advantage, net.value):
            head.register_forward_hook(lambda _m, _i, out: dtypes["heads"].append(out.dtype))
    rng = np.random.default_rng(0)
    batch = {"obs": rng.integers(0, 255, (16, *obs_space.shape), dtype=np.uint8),
             "next_obs": rng.integers(0, 255, (16, *obs_space.shape), dtype=np.uint8),
             "action": rng.integers(0, n, 16), "reward": rng.normal(size=16).astype(np.float32),
             "discount": np.full(16, 0.99, np.float32)}
    before = [p.detach().clone() for p in learner.online.parameters()]
    td_errors = learner.update(batch)
    # online(obs), target(next_obs) and online(next_obs) for double Q: three bodies, two heads each.
    assert dtypes == {"body": [torch.bfloat16] * 3, "heads": [torch.float32] * 6}
    assert np.isfinite(td_errors).all() and all(p.dtype == torch.float32 for p in learner.online.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, learner.online.parameters(), strict=True))
