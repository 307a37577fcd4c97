"""IMPALA and APPO in-process (rollouts.workers: 0): iterations, lag figures, continuous actions, checkpoints,
and the hyperparameters' validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kuberl.api.field_errors import ManifestError
from kuberl.trainer.algorithms.appo import APPO, APPOConfig
from kuberl.trainer.algorithms.config import config_class_for
from kuberl.trainer.algorithms.impala import IMPALA, IMPALAConfig
from kuberl.trainer.learning.bootstrap import bootstrap_rows


def _config(cls=APPOConfig, env: str = "CartPole-v1", env_config: dict | None = None, **training):
    return (cls().environment(env, env_config=env_config or {}).rollouts(workers=0, envs_per_worker=4,
                                                                        fragment_length=32)
            .training(min_iteration_seconds=0.2, train_batch_size=256, **training).debugging(seed=3))


def test_registry_names_the_configs() -> None:
    assert config_class_for("appo") is APPOConfig and config_class_for("impala") is IMPALAConfig
    assert isinstance(_config().build(), APPO)
    assert isinstance(_config(IMPALAConfig).build(), IMPALA)


@pytest.mark.parametrize("cls", [APPOConfig, IMPALAConfig])
def test_in_process_iterations_learn_and_report_lag(cls) -> None:
    algo = _config(cls).build()
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    last = results[-1]
    learner = last["learner"]
    assert learner["updates"] > 0 and learner["updatesTotal"] == sum(r["learner"]["updates"] for r in results)
    # In-process sampling waits for the learner: the lag is bounded by what the learner holds.
    reuse, held = algo.params.batch_reuse, algo.params.buffer_batches
    assert 0 <= learner["policyLagMean"] <= learner["policyLagMax"] <= reuse * held
    assert learner["policyLagUpdatesMax"] == learner["policyLagMax"] * algo.params.broadcast_interval
    assert last["iteration"] == 3 and last["timesteps"] > results[0]["timesteps"] > 0
    assert np.isfinite([learner["policyLoss"], learner["valueLoss"], learner["entropy"]]).all()
    assert last["sampler"]["workerRestarts"] == 0
    assert last["policyVersion"] == learner["updatesTotal"] + 1  # broadcast every update, plus the first


def test_continuous_actions_get_a_gaussian_policy() -> None:
    algo = _config(env="Pendulum-v1").build()
    try:
        result = algo.train()
        action = algo.compute_single_action(np.zeros(3, dtype=np.float32))
        sampled = {float(algo.compute_single_action(np.zeros(3, dtype=np.float32), explore=True)[0])
                   for _ in range(5)}
    finally:
        algo.stop()
    assert result["learner"]["updates"] > 0
    assert np.shape(action) == (1,) and len(sampled) == 5  # a sampled Gaussian, never the same twice


def test_checkpoint_round_trip_gives_the_same_actions_and_counters(tmp_path) -> None:
    algo = _config(observation_filter="mean_std").build()
    try:
        algo.train()
        uri = algo.save(tmp_path)
        obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
        expected = [algo.compute_single_action(o) for o in obs]
        target = {k: v.clone() for k, v in algo.learner.target_policy.state_dict().items()}
        updates, timesteps = algo.updates, algo.timesteps
    finally:
        algo.stop()
    fresh = _config(observation_filter="mean_std").build()
    try:
        fresh.restore(uri)
        assert [fresh.compute_single_action(o) for o in obs] == expected
        assert fresh.updates == updates and fresh.timesteps == timesteps
        assert all((fresh.learner.target_policy.state_dict()[k] == v).all() for k, v in target.items())
        assert fresh.train()["learner"]["updatesTotal"] > updates
    finally:
        fresh.stop()


@pytest.mark.parametrize(("env", "env_config", "reset_rows"), [
    ("CartPole-v1", {"max_episode_steps": 12}, True),  # most episodes truncated, some terminated; reset rows
    # the shared encoder, on a frame stack that resets in the step that ends an episode
    ("kuberl_testing.image_envs:StackedBeacon", {"size": 42, "mistakes": 6, "max_steps": 8}, False),
])
def test_next_values_are_those_of_a_full_pass_over_next_obs(env, env_config, reset_rows) -> None:
    # float32 on every device: the reference pass below runs without autocast, and on a GPU with native bfloat16
    # learner_bf16="auto" would put the learner's encoder under it, a rounding difference this test is not about
    algo = _config(IMPALAConfig, env, env_config).resources(learner_bf16=False).build()
    try:
        d = _train_batch(algo)
        evaluation = algo.learner.evaluate(d)
        values, next_values = evaluation.values, evaluation.next_values
        with torch.no_grad():
            full = algo.model.value(d["next_obs"].flatten(0, 1)).view_as(values)
    finally:
        algo.stop()
    bootstraps = d["valid"] & ~d["terminateds"]
    torch.testing.assert_close(next_values[bootstraps], full[bootstraps], rtol=1e-4, atol=1e-5)
    assert (next_values[~bootstraps] == 0).all()
    assert torch.equal(d["dones"], d["terminateds"] | d["truncateds"] | ~d["valid"])
    reuse, compute = bootstrap_rows(d["terminateds"], d["dones"], d["valid"])
    assert d["truncateds"].any() and d["terminateds"].any() and (not d["valid"].all()) == reset_rows
    assert reuse.sum() > 0.8 * d["valid"].sum()  # most rows need no pass of their own
    assert compute[:-1].any()  # truncated steps bootstrap from their final observation


def _train_batch(algo) -> dict:
    while not algo.loop.buffer:
        algo.sampler.poll(timeout=1.0)
        for fragment in algo.sampler.take(len(algo.sampler.queue)):
            algo.loop.add(fragment)
    return algo.loop.buffer[0].tensors


def _loss_with(learner, d: dict, target_is_current: bool):
    learner.target_is_current = target_is_current
    with torch.no_grad():
        loss = learner.loss(d)
    return torch.stack([loss.total, loss.policy])


def test_appo_skips_the_target_policy_pass_only_right_after_a_sync() -> None:
    algo = _config(target_update_interval=3, lr=0.01).build()
    try:
        d = _train_batch(algo)
        learner = algo.learner
        flags = []
        for _ in range(6):
            learner.update(d)
            flags.append(learner.target_is_current)
        assert flags == [False, False, True, False, False, True] and learner.target_syncs == 2
        # Right after a sync pi_target is pi: the shortcut gives what the target policy's own pass gives.
        torch.testing.assert_close(_loss_with(learner, d, True), _loss_with(learner, d, False), rtol=0, atol=0)
        learner.target_is_current = True
        learner.update(d)  # one step past the sync: the two differ, so the flag is what keeps them apart
        assert not learner.target_is_current
        assert not torch.allclose(_loss_with(learner, d, True), _loss_with(learner, d, False))
    finally:
        algo.stop()


def test_the_learner_reports_the_gradient_norm_before_the_clip_and_the_advantages_size() -> None:
    algo = _config(grad_clip=1e-6, lr=0.01).build()  # a clip that binds on every update
    try:
        d = _train_batch(algo)
        learner = algo.learner
        expected = learner.loss(d)
        before = [p.detach().clone() for p in algo.model.parameters()]
        stats = learner.update(d)
        moved = torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(algo.model.parameters(), before,
                                                                              strict=True)))
        assert stats["gradNorm"] > 1e-3  # the norm before the clip, not the clipped 1e-6
        assert 0.0 < float(moved) < 0.01 * 1.01 * len(before) ** 0.5  # Adam's steps of at most lr per weight
        assert stats["advantageAbsMean"] == pytest.approx(float(expected.extra["advantageAbsMean"]), rel=1e-5)
        assert stats["advantageAbsMean"] > 0.0
    finally:
        algo.stop()


def test_the_encoder_passes_run_under_the_learners_autocast_and_the_heads_and_losses_in_float32() -> None:
    algo = _config(env="kuberl_testing.image_envs:StackedBeacon", env_config={"size": 42, "max_steps": 8},
                   target_update_interval=2, model={"conv": [[8, 8, 4]], "hidden": [16]}).build()
    try:
        learner = algo.learner
        learner.bf16 = True  # spec.learner.bf16: autocast on the learner's device, here the CPU
        seen: list[torch.dtype] = []
        target_seen: list[torch.dtype] = []
        heads: list[torch.dtype] = []
        algo.model.policy.encoder.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
        learner.target_policy.encoder.register_forward_hook(lambda _m, _i, out: target_seen.append(out.dtype))
        for head in (algo.model.policy.out, algo.model.critic_out, learner.target_policy.out):
            head.register_forward_hook(lambda _m, _i, out: heads.append(out.dtype))
        d = _train_batch(algo)
        e = learner.evaluate(d)
        assert {t.dtype for t in (e.logp, e.entropy, e.values, e.next_values)} == {torch.float32}
        terms = [learner.update(d) for _ in range(3)]  # the second runs the target policy's own pass
        assert all(np.isfinite(list(t.values())).all() for t in terms)
        assert set(seen) == {torch.bfloat16} and len(seen) >= 4
        assert target_seen == [torch.bfloat16]  # one update of the three was not right after a sync
        # The heads run in float32: bfloat16 logits put log pi(a|s) off by as much as a policy step moves it.
        assert set(heads) == {torch.float32} and len(heads) >= len(seen) + len(target_seen)
        assert all(p.dtype == torch.float32 for p in algo.model.parameters())  # weights stay float32
    finally:
        algo.stop()


@pytest.mark.parametrize(("field", "value"), [("clipParam", -0.1), ("rhoBar", 0), ("learnerQueueSize", 0),
                                              ("batchReuse", 0), ("trainBatchSize", 0)])
def test_bad_hyperparameters_name_their_field(field, value) -> None:
    with pytest.raises(ManifestError) as info:
        APPOConfig().environment("CartPole-v1").training(**{field: value}).validate()
    assert [e.path for e in info.value.errors] == [f"spec.config.{field}"]


def test_impala_refuses_appo_only_settings() -> None:
    with pytest.raises(ManifestError) as info:
        IMPALAConfig().environment("CartPole-v1").training(clip_param=0.3).validate()
    assert [e.path for e in info.value.errors] == ["spec.config.clipParam"]
