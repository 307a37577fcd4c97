"""Playing whole multi-agent episodes with the learners' policies (evaluation, `kuberl evaluate`): no learning."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kuberl.trainer.evaluation.episodes import VIDEO_RENDER_MODE, PlayedEpisodes
from kuberl.trainer.multiagent.envs import make_parallel_env
from kuberl.trainer.multiagent.rollout_worker import env_action
from kuberl.trainer.sampling.envs import EnvSettings
from kuberl.trainer.sampling.policy_settings import PolicySettings

# (policy, agent, observation) -> action
AgentActor = Callable[[str, str, Any], Any]


@dataclass(frozen=True)
class PlayedMultiAgentEpisodes(PlayedEpisodes):
    """`returns` are team returns: the sum over agents."""

    agent_returns: dict[str, list[float]] = field(default_factory=dict)


def _play_one(env: Any, policy_of: Callable[[str], str], act: AgentActor, seed: int,
              frames: list[np.ndarray] | None = None) -> tuple[dict[str, float], int]:
    """One episode: each agent's return and the episode's length; with `frames`, a frame after reset and after
    every step."""
    obs, _ = env.reset(seed=seed)
    returns: dict[str, float] = {}
    length = 0
    if frames is not None:
        frames.append(env.render())
    while env.agents:
        actions = {agent: env_action(env.action_space(agent), act(policy_of(agent), agent, obs[agent]))
                   for agent in env.agents}
        obs, rewards, _, _, _ = env.step(actions)
        for agent in actions:
            returns[agent] = returns.get(agent, 0.0) + float(rewards.get(agent, 0.0))
        length += 1
        if frames is not None:
            frames.append(env.render())
    return returns, length


def _encode(frames: list[np.ndarray], fps: int) -> bytes:
    """The frames as an MP4 (imageio-ffmpeg, as single-agent evaluation videos are written)."""
    import imageio.v2 as imageio

    with tempfile.TemporaryDirectory(prefix="kuberl-video-") as folder:
        path = Path(folder) / "evaluation.mp4"
        # imageio's stub asks for a List[ArrayLike] (invariant) where it takes any sequence of frames.
        imageio.mimwrite(path, frames, fps=fps, macro_block_size=2,  # type: ignore[arg-type]
                         ffmpeg_params=["-preset", "veryfast"])
        return path.read_bytes()


def play_multi_agent(env: EnvSettings, policy_of: Callable[[str], str], act: AgentActor,
                     seeds: list[int], *, record_first: bool = False) -> PlayedMultiAgentEpisodes:
    """One episode per seed; every live agent acts with `act(policy, agent, obs)` each step. With `record_first`
    the first episode is played in an env rendering rgb_array frames, and comes back as an MP4 too."""
    team_returns: list[float] = []
    lengths: list[int] = []
    agent_returns: dict[str, list[float]] = {}
    video = None

    def add(returns: dict[str, float], length: int) -> None:
        team_returns.append(float(sum(returns.values())))
        lengths.append(length)
        for agent, value in returns.items():
            agent_returns.setdefault(agent, []).append(value)

    rest = seeds
    if record_first and seeds:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders rgb_array without a display
        recording = make_parallel_env(env.id, {**env.config, "render_mode": VIDEO_RENDER_MODE}, env.wrappers)
        frames: list[np.ndarray] = []
        try:
            add(*_play_one(recording, policy_of, act, seeds[0], frames))
            fps = int(recording.metadata.get("render_fps", 30) or 30)
        finally:
            recording.close()
        video = _encode(frames, fps)
        rest = seeds[1:]
    if rest:
        playing = make_parallel_env(env.id, env.config, env.wrappers)
        try:
            for seed in rest:
                add(*_play_one(playing, policy_of, act, seed))
        finally:
            playing.close()
    return PlayedMultiAgentEpisodes(team_returns, lengths, video, agent_returns)


def agent_means(agent_returns: dict[str, list[float]]) -> dict[str, float]:
    return {agent: float(np.mean(values)) for agent, values in agent_returns.items() if values}




class MultiAgentEvaluationWorker:
    """An evaluation actor of a multi-agent run: every policy, loaded with the learners' weights, playing whole
    episodes in its own env (`kuberl.trainer.evaluation.evaluator` starts it as it would an `EvaluationWorker`)."""

    def __init__(self, make: Any, policies: Any, observation_filter: str, seed: int):
        from kuberl.trainer.learning.device import configure_cpu_threads

        configure_cpu_threads()
        self.env: EnvSettings = make.settings
        self.policy_map = policies.policy_map
        self.policies = policies.build(seed)

    def evaluate(self, weights: dict[str, Any], filter_state: Any, seeds: list[int], *, explore: bool,
                 record_first: bool, settings: PolicySettings | None = None) -> PlayedEpisodes:
        """Load every policy's weights and play one episode per seed: team returns, lengths and the video bytes
        (or None)."""
        for name, policy_weights in weights.items():
            self.policies[name].set_weights(policy_weights)

        def act(policy: str, agent: str, obs: Any) -> Any:
            row = np.asarray(self.policy_map.observation(policy, agent, np.asarray(obs)))
            actions, _extras = self.policies[policy].compute_actions(
                row[None] if row.dtype == np.uint8 else row[None].astype(np.float32), explore=explore)
            return actions[0]

        played = play_multi_agent(self.env, self.policy_map.policy, act, seeds, record_first=record_first)
        return PlayedEpisodes(played.returns, played.lengths, played.video)


__all__ = ["MultiAgentEvaluationWorker", "PlayedMultiAgentEpisodes", "agent_means", "play_multi_agent"]
