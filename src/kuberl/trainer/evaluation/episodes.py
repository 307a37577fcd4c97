"""Play whole evaluation episodes with any policy; optionally record the first one as an MP4."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from kuberl.trainer.sampling.envs import EnvSettings, make_env

VIDEO_RENDER_MODE = "rgb_array"


@dataclass(frozen=True)
class EnvFactory:
    """Builds an evaluation env (picklable, for Ray actors); render_mode only for a recorded episode.
    Evaluation plays whole games with unclipped scores (training=False: no episodic life, no reward clip)."""

    settings: EnvSettings

    def __call__(self, render_mode: str | None = None) -> gym.Env:
        settings = self.settings
        if render_mode is not None:
            settings = replace(settings, config={**settings.config, "render_mode": render_mode})
        return make_env(settings, training=False)


@dataclass(frozen=True)
class PlayedEpisodes:
    """Whole episodes played with a policy, in the order played: what `play_episodes` and an evaluation actor
    (pickled back from its Ray process) return."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    video: bytes | None = None  # MP4 of the first episode, when one was asked for

    @classmethod
    def joined(cls, parts: list[PlayedEpisodes]) -> PlayedEpisodes:
        """The episodes of every part, part after part; the first video of any."""
        return cls(returns=[r for part in parts for r in part.returns],
                   lengths=[n for part in parts for n in part.lengths],
                   video=next((part.video for part in parts if part.video), None))


def _clip(env: gym.Env, action: Any) -> Any:
    if isinstance(env.action_space, gym.spaces.Box):
        return np.clip(action, env.action_space.low, env.action_space.high)
    return action


def _play_one(env: gym.Env, act: Callable[[Any], Any], seed: int) -> tuple[float, int]:
    obs, _ = env.reset(seed=seed)
    total, length, done = 0.0, 0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(_clip(env, act(obs)))
        total += float(reward)
        length += 1
        done = terminated or truncated
    return total, length


def _recorder_class() -> type:
    from gymnasium.wrappers import RecordVideo

    class ImageioRecordVideo(RecordVideo):
        """Gymnasium's RecordVideo (a frame after reset and after every step), encoding with imageio-ffmpeg
        so that every captured frame is exactly one video frame (moviepy's float clock can add one)."""

        def stop_recording(self) -> None:
            import imageio.v2 as imageio

            frames, self.recorded_frames = self.recorded_frames, []
            if frames:
                path = Path(self.video_folder) / f"{self._video_name}.mp4"
                # macro_block_size 2: pad odd sizes for yuv420p instead of rescaling to multiples of 16.
                # x264's veryfast preset: measured 2.8 s instead of 4.8 s (medium) for 500 CartPole
                # frames, at the same file size.
                # imageio's stub asks for a List[ArrayLike] (invariant) where it takes any sequence of frames.
                imageio.mimwrite(path, frames, fps=self.frames_per_sec, macro_block_size=2,  # type: ignore[arg-type]
                                 ffmpeg_params=["-preset", "veryfast"])
            self.recording = False
            self._video_name = None

    return ImageioRecordVideo


def _record_one(make: EnvFactory, act: Callable[[Any], Any], seed: int) -> tuple[float, int, bytes]:
    """One episode recorded as an MP4: a frame after reset and after every step."""
    # pygame (classic-control rendering) needs no display for rgb_array; SDL's dummy driver says so.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    with tempfile.TemporaryDirectory(prefix="kuberl-video-") as parent:
        folder = Path(parent) / "video"  # a folder RecordVideo makes itself, so it warns of no overwrite
        env = _recorder_class()(make(VIDEO_RENDER_MODE), str(folder), episode_trigger=lambda _: True,
                                name_prefix="evaluation", disable_logger=True)
        try:
            total, length = _play_one(env, act, seed)
        finally:
            env.close()  # writes the file
        videos = sorted(folder.glob("*.mp4"))
        if not videos:
            raise RuntimeError("RecordVideo wrote no MP4 file")
        return total, length, videos[0].read_bytes()


def play_episodes(make: EnvFactory, act: Callable[[Any], Any], seeds: list[int], *,
                  record_first: bool = False) -> PlayedEpisodes:
    """One episode per seed, acting with `act(raw_obs) -> action`; a recorded first episode counts too."""
    returns: list[float] = []
    lengths: list[int] = []
    video = None
    rest = seeds
    if record_first and seeds:
        total, length, video = _record_one(make, act, seeds[0])
        returns.append(total)
        lengths.append(length)
        rest = seeds[1:]
    if rest:
        env = make()
        try:
            for seed in rest:
                total, length = _play_one(env, act, seed)
                returns.append(total)
                lengths.append(length)
        finally:
            env.close()
    return PlayedEpisodes(returns, lengths, video)
