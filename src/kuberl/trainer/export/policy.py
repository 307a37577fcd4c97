"""The module an export saves: raw observations in, greedy actions out, with everything between.

`compute_single_action` casts an observation to float32 (an image's uint8 values too; the conv
encoder scales them by 1/255 inside the network), normalises it with the observation filter in
float64 and clips it, then asks the algorithm's network. `ExportedPolicy` does the same steps in
the same precision inside the graph, so an exported file gives the same actions on its own.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from kuberl.trainer.sampling.filters import CLIP, MeanStdFilter

INPUT_NAME = "obs"
OUTPUT_NAME = "action"
STD_EPSILON = 1e-8  # MeanStdFilter's


class ExportedPolicy(nn.Module):
    """obs [batch, *observation shape] in the env's dtype -> actions [batch] (Discrete) or [batch, n] (Box)."""

    mean: torch.Tensor  # buffers, with a filter
    scale: torch.Tensor

    def __init__(self, policy: nn.Module, mean: np.ndarray | None = None, std: np.ndarray | None = None,
                 clip: float = CLIP) -> None:
        super().__init__()
        self.policy = policy.requires_grad_(False)  # actions come out as plain tensors
        self.normalise = mean is not None
        self.clip = float(clip)
        if mean is not None and std is not None:
            self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float64))
            self.register_buffer("scale", torch.as_tensor(std + STD_EPSILON, dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.to(torch.float32)
        if self.normalise:
            x = ((x.to(torch.float64) - self.mean) / self.scale).clamp(-self.clip, self.clip).to(torch.float32)
        return self.policy(x)


def exported_policy(algo: Any) -> ExportedPolicy:
    """The algorithm's greedy policy (its `policy_module()` hook) behind its observation filter, on the CPU."""
    obs_filter = algo.obs_filter
    if isinstance(obs_filter, MeanStdFilter):
        stats = obs_filter.get_state()
        return ExportedPolicy(algo.policy_module(), stats.mean, stats.std, obs_filter.clip).eval()
    return ExportedPolicy(algo.policy_module()).eval()


def example_input(space: gym.Space, batch: int = 2) -> torch.Tensor:
    """A batch of observations of the space's shape and dtype (the values do not matter to tracing)."""
    sample = np.stack([space.sample() for _ in range(batch)]).astype(space.dtype)
    return torch.as_tensor(sample)


def describe(algo: Any, **extra: Any) -> str:
    """What the file holds, as JSON: how to feed it and what comes out (stored inside the file)."""
    obs_space, act_space = algo.observation_space, algo.action_space
    if isinstance(act_space, gym.spaces.Discrete):
        action: dict[str, Any] = {"type": "Discrete", "n": int(act_space.n)}
    else:
        action = {"type": "Box", "shape": list(act_space.shape), "low": np.asarray(act_space.low).tolist(),
                  "high": np.asarray(act_space.high).tolist(), "note": "the mean, not clipped to the bounds"}
    return json.dumps({
        "format": "kuberl-policy/v1",
        "algorithm": algo.spec.algorithm,
        "env": algo.spec.env.id,
        "input": {"name": INPUT_NAME, "shape": ["batch", *obs_space.shape], "dtype": str(obs_space.dtype)},
        "output": {"name": OUTPUT_NAME, "action": action},
        "observationFilter": algo.params.observation_filter,
        "iteration": algo.iteration,
        "timesteps": algo.timesteps,
        **extra,
    })
