"""Conv models for image observations: chosen automatically, uint8 scaled on the device, shared by PPO's
heads, the dueling Q-head; checkpoints restored with map_location; the vector fast path untouched."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from kuberl.api.hyperparams import DQNParams, PPOParams
from kuberl.trainer.models.actor_critic import ActorCritic
from kuberl.trainer.models.encoders import (
    ConvEncoder,
    EncoderSpec,
    ImageLayoutError,
    VectorEncoder,
    build_encoder,
    conv_output_shape,
    is_image_space,
)
from kuberl.trainer.models.policy_value import PolicyValueNet
from kuberl.trainer.models.q_network import build_q_network
from kuberl.trainer.models.weights import state_dict_to_numpy, torch_bytes, torch_load_bytes
from kuberl.trainer.sampling.policies import (
    PPOPolicyFactory,
    PPOSamplingPolicy,
    QPolicyFactory,
    TorchPPOPolicy,
)

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
RGB = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(6)


def test_images_get_the_nature_conv_stack_and_vectors_an_mlp():
    assert is_image_space(FRAMES) and is_image_space(RGB) and not is_image_space(VECTOR)
    encoder = build_encoder(FRAMES, EncoderSpec())
    assert isinstance(encoder, ConvEncoder) and encoder.out_features == 512
    convs = [m for m in encoder.conv if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
    assert conv_output_shape(FRAMES, [[32, 8, 4], [64, 4, 2], [64, 3, 1]]) == (64, 7, 7)
    assert isinstance(build_encoder(VECTOR, EncoderSpec()), VectorEncoder)


def test_channels_last_images_are_permuted_and_a_stack_that_does_not_fit_is_refused():
    encoder = build_encoder(RGB, EncoderSpec(conv=((16, 8, 4),), conv_hidden=(32,)))
    assert encoder(torch.zeros(2, 210, 160, 3, dtype=torch.uint8)).shape == (2, 32)
    with pytest.raises(ImageLayoutError, match="kernel 8"):
        conv_output_shape(gym.spaces.Box(0, 255, (1, 6, 6), np.uint8), [[8, 8, 4]])


def test_uint8_is_scaled_where_it_is_computed_and_floats_of_pixels_give_the_same_features():
    torch.manual_seed(0)
    encoder = build_encoder(FRAMES, EncoderSpec())
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    as_uint8 = encoder(frames)
    assert torch.allclose(as_uint8, encoder(frames.float()), atol=1e-6)
    assert not torch.allclose(as_uint8, encoder(frames.float() / 255.0))


def test_ppo_actor_critic_shares_the_encoder_for_images_only():
    params = PPOParams(model={"conv": [[8, 8, 4], [16, 4, 2]], "hidden": [64]})
    model = ActorCritic(FRAMES, ACTIONS, params.hidden, params.activation, EncoderSpec.from_params(params))
    assert model.shared and model.actor.net[0] is not None
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 6, (5,))
    logp, entropy, values = model.evaluate(obs, actions)
    assert logp.shape == entropy.shape == values.shape == (5,)
    assert torch.allclose(values, model.value(obs)) and torch.allclose(logp, model.actor.log_prob_entropy(obs, actions)[0])
    encoder_ids = {id(p) for p in model.actor.net[0].parameters()}
    assert not encoder_ids & {id(p) for p in model.critic.parameters()}  # the critic is a head on the encoder
    vector = ActorCritic(VECTOR, ACTIONS, [16], "tanh")
    assert not vector.shared


def test_impala_value_head_sits_on_the_policy_encoder_for_images_only():
    spec = EncoderSpec(conv=((8, 8, 4),), conv_hidden=(16,))
    model = PolicyValueNet(FRAMES, ACTIONS, spec)
    assert model.shared and model.critic_encoder is None
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    inputs, values = model.evaluate(obs)
    assert torch.allclose(inputs, model.policy(obs)) and torch.allclose(values, model.value(obs))
    values.sum().backward()  # the value loss trains the shared encoder
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.policy.encoder.parameters())
    assert [len(group) for group in model.clip_groups()] == [len(list(model.parameters()))]  # one global norm
    vector = PolicyValueNet(VECTOR, ACTIONS, EncoderSpec(hidden=(16,)))
    assert not vector.shared and vector.critic_encoder is not None
    policy, critic = vector.clip_groups()
    assert {id(p) for p in policy} == {id(p) for p in vector.policy.parameters()}
    assert not {id(p) for p in policy} & {id(p) for p in critic}


def test_worker_policies_pick_torch_for_images_and_numpy_for_vectors_and_match_the_learner():
    params = PPOParams(model={"conv": [[8, 8, 4]], "hidden": [32]})
    factory = PPOPolicyFactory.from_params(params)
    assert isinstance(factory(VECTOR, ACTIONS, 0), PPOSamplingPolicy)
    policy = factory(FRAMES, ACTIONS, 0)
    assert isinstance(policy, TorchPPOPolicy)
    model = ActorCritic(FRAMES, ACTIONS, params.hidden, params.activation, EncoderSpec.from_params(params))
    policy.set_weights(state_dict_to_numpy(model.actor))
    obs = np.random.default_rng(0).integers(0, 256, (4, 4, 84, 84), dtype=np.uint8)
    actions, extras = policy.compute_actions(obs, explore=False)
    with torch.no_grad():
        expected = model.actor.log_prob_entropy(torch.as_tensor(obs), torch.as_tensor(actions))[0].numpy()
    np.testing.assert_allclose(extras["logp"], expected, atol=1e-5)
    assert actions.dtype == np.int64


def test_dueling_conv_q_network_on_workers_and_learner():
    params = DQNParams(model={"conv": [[8, 8, 4], [16, 4, 2]], "hidden": [64]}, dueling=True)
    network = build_q_network(FRAMES, ACTIONS, params)
    assert isinstance(network.body, ConvEncoder) and network.value is not None
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    q = network(obs)
    assert q.shape == (3, 6)
    policy = QPolicyFactory.from_params(params)(FRAMES, ACTIONS, 0)
    policy.set_weights(state_dict_to_numpy(network))
    np.testing.assert_allclose(policy.q_values(obs.numpy()), q.detach().numpy(), atol=1e-5)


def test_vector_q_network_keeps_its_checkpoint_layout():
    network = build_q_network(VECTOR, gym.spaces.Discrete(2), DQNParams(hidden=[8], dueling=True))
    assert {"body.0.weight", "advantage.weight", "value.weight"} <= set(network.state_dict())


def test_checkpoint_bytes_restore_with_map_location():
    """A state written on one device loads onto another: here CPU -> meta (no data) and back to the CPU."""
    model = ActorCritic(FRAMES, ACTIONS, [16], "tanh", EncoderSpec(conv=((8, 8, 4),), conv_hidden=(16,)))
    data = torch_bytes(model.state_dict())
    on_meta = torch_load_bytes(data, "meta")
    assert all(t.device.type == "meta" for t in on_meta.values())
    restored = ActorCritic(FRAMES, ACTIONS, [16], "tanh", EncoderSpec(conv=((8, 8, 4),), conv_hidden=(16,)))
    restored.load_state_dict(torch_load_bytes(data, "cpu"))
    for key, value in model.state_dict().items():
        assert torch.equal(value, restored.state_dict()[key])
