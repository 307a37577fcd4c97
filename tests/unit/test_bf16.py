"""spec.learner.bf16 (auto, true, false): resolved from the learner's device (auto: float32 on every CPU, bfloat16
on a GPU that computes it), warned of where it is emulated, recorded; the CPU's model and flags from
/proc/cpuinfo; SAC's Q-values in float32 under it."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import jsonschema
import numpy as np
import pytest
import torch

from kuberl.api.crd import build_crd
from kuberl.api.field_errors import ManifestError
from kuberl.api.hyperparams import PPOParams, SACParams
from kuberl.api.validation import validate_document
from kuberl.trainer import cpu
from kuberl.trainer.cpu import cpu_flags, cpu_model, cpu_summary, native_bf16_flags
from kuberl.trainer.learners import sac as sac_learner
from kuberl.trainer.learners.ppo import PPOLearner
from kuberl.trainer.learners.sac import build_sac_learner
from kuberl.trainer.learning import device as device_module
from kuberl.trainer.learning.device import learner_autocast, learner_bf16, resolve_bf16
from kuberl.trainer.models.actor_critic import ActorCritic
from kuberl.trainer.models.encoders import EncoderSpec
from kuberl.trainer.run.run_record import build_record, record_text

AVX2_EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma\n"
ZEN4 = "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\nflags\t\t: avx2 avx512f avx512_bf16\n"
SAPPHIRE = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
            "flags\t\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n")
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n"
IMAGES = gym.spaces.Box(0, 255, (4, 44, 44), np.uint8)  # the Nature CNN, on small frames


def test_the_cpus_flags_and_model_come_from_cpuinfo():
    assert cpu_flags(AVX2_EPYC) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert native_bf16_flags(cpu_flags(AVX2_EPYC)) == []
    assert native_bf16_flags(cpu_flags(ZEN4)) == ["avx512_bf16"]
    assert native_bf16_flags(cpu_flags(SAPPHIRE)) == ["amx_bf16"]
    assert native_bf16_flags(cpu_flags(ARM)) == []  # an x86 flag set is what is known to pay
    assert cpu_flags("") == frozenset() and cpu_model(SAPPHIRE) == "Intel(R) Xeon(R) Platinum 8480+"


def test_a_benchmark_row_names_its_cpu():
    assert cpu_summary(AVX2_EPYC) == {"cpu_model": "AMD EPYC 7B13", "cpu_bf16": False, "cpu_flags": ["avx2"]}
    assert cpu_summary(ZEN4) == {"cpu_model": "AMD EPYC 9654 96-Core Processor", "cpu_bf16": True,
                                 "cpu_flags": ["avx2", "avx512f", "avx512_bf16"]}
    assert cpu_summary(SAPPHIRE)["cpu_bf16"] is True
    here = cpu_summary()  # this machine's: whatever it is, the keys are there
    assert set(here) == {"cpu_model", "cpu_bf16", "cpu_flags"} and isinstance(here["cpu_bf16"], bool)


@pytest.mark.parametrize(("flags", "native"), [(AVX2_EPYC, False), (ZEN4, True), (SAPPHIRE, True)])
def test_auto_trains_in_float32_on_every_cpu(flags, native):
    # the same default whatever the instruction set: native bfloat16 is reported, not switched on
    choice = resolve_bf16("auto", "cpu", cpu_flags=cpu_flags(flags))
    assert choice.enabled is False and choice.native is native and choice.warning is None
    assert choice.reason.startswith("auto: off on a CPU (float32)")
    assert ("avx512_bf16" in choice.reason or "amx_bf16" in choice.reason)
    assert ("no native bfloat16" in choice.reason) is not native
    assert resolve_bf16("auto", "cpu", conv=False, cpu_flags=cpu_flags(flags)).enabled is False
    # true is what turns it on where the CPU computes it, without a warning there
    forced = resolve_bf16(True, "cpu", cpu_flags=cpu_flags(flags))
    assert forced.enabled is True and (forced.warning is None) is native


def test_true_on_a_cpu_without_bf16_proceeds_and_says_the_cost():
    choice = resolve_bf16(True, "cpu", cpu_flags=cpu_flags(AVX2_EPYC))
    assert choice.enabled is True and choice.native is False
    assert choice.warning is not None and "emulated" in choice.warning
    assert "order of magnitude slower per minibatch" in choice.warning and "avx512_bf16" in choice.warning
    native = resolve_bf16(True, "cpu", cpu_flags=cpu_flags(ZEN4))
    assert native.enabled is True and native.warning is None
    assert resolve_bf16(False, "cpu", cpu_flags=cpu_flags(ZEN4)).enabled is False
    assert resolve_bf16(True, "mps").enabled is False  # no bfloat16 autocast there


@pytest.mark.parametrize(("capability", "enabled"), [((7, 0), False), ((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_auto_on_a_gpu_follows_its_compute_capability(capability, enabled):
    assert resolve_bf16("auto", "cuda", cuda_capability=capability).enabled is enabled
    forced = resolve_bf16(True, "cuda", cuda_capability=capability)
    assert forced.enabled is True and (forced.warning is None) is enabled


def _on_cpu(monkeypatch: pytest.MonkeyPatch, cpuinfo: str) -> None:
    monkeypatch.setattr(cpu, "read_cpuinfo", lambda path="/proc/cpuinfo": cpuinfo)
    monkeypatch.setattr(device_module, "_warned", set())


def _ppo(bf16: Any) -> PPOLearner:
    params = PPOParams()
    model = ActorCritic(IMAGES, gym.spaces.Discrete(6), params.hidden, params.activation,
                        EncoderSpec.from_params(params))
    return PPOLearner(model, params, torch.device("cpu"), np.random.default_rng(0), bf16=bf16)


def test_a_cpu_learner_trains_in_float32_unless_bf16_is_true(monkeypatch):
    for cpuinfo in (AVX2_EPYC, ZEN4):
        _on_cpu(monkeypatch, cpuinfo)
        assert _ppo("auto").bf16 is False
    assert _ppo(True).bf16 is True  # ZEN4's native bfloat16, on request


def test_true_on_an_avx2_cpu_warns_once_a_process(monkeypatch):
    _on_cpu(monkeypatch, AVX2_EPYC)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert learner_bf16(True, torch.device("cpu")) is True
        assert learner_bf16(True, torch.device("cpu")) is True
    assert len([w for w in caught if "emulated" in str(w.message)]) == 1


def _doc(learner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "x"},
            "spec": {"algorithm": "ppo", "env": {"id": "CartPole-v1"}, "stop": {"timesteps": 1000},
                     "learner": learner}}


def test_bf16_is_auto_by_default_and_takes_yaml_booleans():
    assert validate_document(_doc({})).spec.learner.bf16 == "auto"
    for value in ("auto", True, False):
        assert validate_document(_doc({"bf16": value})).spec.learner.bf16 == value
    with pytest.raises(ManifestError) as refused:
        validate_document(_doc({"bf16": "fast"}))
    assert [str(e) for e in refused.value.errors] == ["spec.learner.bf16: is 'fast'; use auto, true or false"]


def test_the_crd_takes_auto_true_and_false_for_bf16():
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node = schema["properties"]["spec"]["properties"]["learner"]["properties"]["bf16"]
    assert "type" not in node and node["x-kubernetes-preserve-unknown-fields"] is True  # a scalar of two types
    for value in ("auto", True, False):
        jsonschema.validate(_doc({"bf16": value}), schema, cls=jsonschema.Draft7Validator)
    for value in ("fast", 1, "true"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(_doc({"bf16": value}), schema, cls=jsonschema.Draft7Validator)


def test_the_run_record_holds_the_choice_and_the_cpus_flags():
    choice = resolve_bf16("auto", "cpu", cpu_flags=cpu_flags(AVX2_EPYC)).record()
    machine = {"cpuModel": "AMD EPYC 7B13", "cpuFlags": ["avx2"], "cpuBf16": False, "cpuCount": 2, "gpus": []}
    record = build_record(validate_document(_doc({})), {"versions": {}, "machine": machine, "learner": {"bf16": choice}},
                          attempt=1, run_uri="file:///r", image=None, started_at=0.0)
    assert record["learner"]["bf16"] == {"setting": "auto", "device": "cpu", "enabled": False, "native": False,
                                         "reason": choice["reason"]}
    text = record_text(record)
    assert "cpu flags:  avx2" in text
    assert ("bf16:       auto: off on a CPU (float32), the CPU has no native bfloat16 (avx512_bf16 or amx_bf16) "
            "(learner.bf16 on cpu)") in text


# -- SAC: Q-values in float32 under the learner's autocast ---------------------------------------------------
def _sac_on_images() -> sac_learner.SACLearner:
    torch.manual_seed(0)
    params = SACParams()
    learner = build_sac_learner(IMAGES, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), params, torch.device("cpu"))
    learner.bf16 = True  # spec.learner.bf16: autocast on the learner's device, here the CPU
    for q in (learner.critic.q1, learner.critic.q2, learner.critic_target.q1, learner.critic_target.q2):
        q.head[-1].bias.data.fill_(700.0)  # a Q of ~700: bfloat16 would hold it in steps of 4
    return learner


def _batch(rows: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (rows, *IMAGES.shape), dtype=np.uint8)
    return {"obs": obs, "next_obs": obs[::-1].copy(), "action": rng.uniform(-1, 1, (rows, 2)).astype(np.float32),
            "reward": np.full(rows, 3.0, np.float32), "discount": np.full(rows, 0.99, np.float32)}


def test_sac_q_heads_output_float32_under_autocast():
    learner = _sac_on_images()
    t = {k: torch.as_tensor(v) for k, v in _batch().items()}
    q1, q2 = learner.critic(t["obs"], t["action"], learner._autocast)
    assert q1.dtype == torch.float32 and q2.dtype == torch.float32
    with learner_autocast(learner.device, True):  # the encoder's features under autocast are bfloat16
        assert learner.critic.q1.encoder(t["obs"]).dtype == torch.bfloat16


def test_sac_under_bf16_regresses_q_values_of_700_at_float32_precision(monkeypatch):
    learner = _sac_on_images()
    batch = _batch()
    t = {k: torch.as_tensor(v) for k, v in batch.items()}
    with torch.no_grad():  # the critic in float32, before the update moves it
        reference = learner.critic(t["obs"], t["action"])[0]
    assert reference.abs().min() > 500
    seen: dict[str, torch.Tensor] = {}
    real_loss = sac_learner.critic_loss

    def spy(q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor, weights: Any = None) -> Any:
        seen.update(q1=q1.detach(), targets=targets.detach())
        return real_loss(q1, q2, targets, weights)

    monkeypatch.setattr(sac_learner, "critic_loss", spy)
    learner.update(batch)
    # bfloat16 would round a Q of 700 to a multiple of 4 (up to 2 off); the encoder's rounding in bfloat16 moves
    # the features, but only the heads' output precision is at stake here: the values are near the float32 ones
    # and not on bfloat16's grid
    assert seen["q1"].dtype == torch.float32 and seen["targets"].dtype == torch.float32
    assert torch.allclose(seen["q1"], reference, atol=0.5)
    off_grid = (seen["q1"] - seen["q1"].to(torch.bfloat16).float()).abs()
    assert off_grid.max() > 0.01  # values between bfloat16's steps: the heads ran in float32
    targets_off_grid = (seen["targets"] - seen["targets"].to(torch.bfloat16).float()).abs()
    assert targets_off_grid.max() > 0.01
