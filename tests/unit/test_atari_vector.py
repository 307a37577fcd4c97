"""The atari preset on ALE's own vector env: the same frames as Gymnasium's wrappers, sticky actions as the id
registers them, lives that end the learner's episode but not the game, and whole games' unclipped scores."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from kuberl.trainer.sampling import rollout_worker
from kuberl.trainer.sampling.atari_vector import RESETS, GameScoreVector, vector_kwargs
from kuberl.trainer.sampling.envs import EnvSettings, autoreset_mode, gym_spec, make_vector_env
from kuberl.trainer.sampling.rollout_worker import RolloutWorker, WorkerConfig


class ScriptedGames(gym.vector.VectorEnv):
    """One env whose steps return scripted (reward, terminated, lives); autoresets on the next step."""

    def __init__(self, script: list[tuple[float, bool, int]]):
        self.num_envs = 1
        self.script = list(script)
        self.single_observation_space = gym.spaces.Box(0, 255, (1,), np.uint8)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 1)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, 1)
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def reset(self, **kwargs):
        return np.zeros((1, 1), np.uint8), {"lives": np.array([3])}

    def step(self, actions):
        reward, terminated, lives = self.script.pop(0)
        return (np.zeros((1, 1), np.uint8), np.array([reward]), np.array([terminated]), np.array([False]),
                {"lives": np.array([lives])})


def test_a_game_ends_with_its_last_life_and_reports_the_unclipped_score_the_reset_step_scores_nothing():
    env = GameScoreVector(ScriptedGames([
        (4.0, False, 3), (7.0, True, 2),  # a lost life: a terminal for the learner, the game goes on
        (1.0, False, 2), (0.0, True, 0),  # the last life: the game is over
        (0.0, False, 3),  # the autoreset step starts the next game
        (-3.0, False, 3), (0.0, True, 0),
    ]))
    env.reset(seed=0)
    rewards, scores, resets = [], [], []
    for _ in range(7):
        _, reward, terminated, _, info = env.step(np.array([0]))
        rewards.append(float(reward[0]))
        scores.append((float(info["game_return"][0]), int(info["game_length"][0])) if info["_game_return"][0] else None)
        resets.append(bool(info[RESETS][0]))
    assert rewards == [1.0, 1.0, 1.0, 0.0, 0.0, -1.0, 0.0]  # clipped for the learner
    assert scores == [None, None, None, (12.0, 4), None, None, (-3.0, 2)]
    assert resets == [False, False, False, True, False, False, True]  # game overs, not lost lives


class NoOpPolicy:
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int):
        pass

    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        return np.zeros(len(obs), dtype=np.int64), {}

    def set_weights(self, weights) -> None:
        pass


def test_after_a_lost_life_the_next_step_is_a_real_transition_and_only_a_game_over_resets(monkeypatch):
    """ALE resets on the step after a game over, not after a lost life (which ends only the learner's episode)."""
    script = [
        (4.0, False, 3), (7.0, True, 2),  # a lost life
        (1.0, False, 2),  # the game goes on: a real transition
        (0.0, True, 0),  # game over
        (0.0, False, 3),  # the autoreset step: no transition
        (-3.0, False, 3),
    ]
    monkeypatch.setattr(rollout_worker, "make_vector_env", lambda *_, **__: GameScoreVector(ScriptedGames(script)))
    worker = RolloutWorker(WorkerConfig("ALE/Pong-v5", num_envs=1, fragment_length=6, preprocessing="atari"),
                           NoOpPolicy)
    batch = worker.sample()
    assert batch.data["valid"][:, 0].tolist() == [True, True, True, True, False, True]
    assert batch.data["terminateds"][:, 0].tolist() == [False, True, False, True, False, False]
    assert batch.env_steps == 5
    assert [(e["return"], e["length"]) for e in batch.episodes] == [(12.0, 4)]


class RandomPolicy(NoOpPolicy):
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, seed: int):
        self.rng = np.random.default_rng(seed)
        self.n = int(action_space.n)

    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        return self.rng.integers(0, self.n, len(obs)), {}


def test_on_a_real_game_with_lives_the_rows_after_an_end_are_a_reset_or_fire_and_no_transition():
    """Breakout played at random loses a life every few dozen steps. The row after each learner's episode end is
    no transition: after a game over ALE's reset (its observation's stack is all zero frames but the newest), after
    a lost life the FIRE press that puts the ball back in play (the game goes on: no zero frames)."""
    config = WorkerConfig("ALE/Breakout-v5", num_envs=2, fragment_length=300, preprocessing="atari", seed=0)
    worker = RolloutWorker(config, RandomPolicy)
    try:
        batch = worker.sample()
    finally:
        worker.stop()
    d = batch.data
    ended = d["terminateds"] | d["truncateds"]
    np.testing.assert_array_equal(~d["valid"][1:], ended[:-1])
    reset_rows = d["next_obs"][:, :, :-1].reshape(*d["valid"].shape, -1).max(axis=-1) == 0
    assert (reset_rows <= ~d["valid"]).all()  # every ALE reset is a no-transition row
    fire_rows = ~d["valid"] & ~reset_rows
    assert fire_rows.sum() >= 4  # lost lives, each followed by FIRE
    assert reset_rows.sum() <= len(batch.episodes)  # one reset per game over


def test_registered_defaults_stay_unless_the_manifest_says_otherwise():
    registered = dict(gym_spec("ALE/Pong-v5").kwargs)
    kwargs = vector_kwargs(registered, {})
    assert kwargs is not None and kwargs["repeat_action_probability"] == 0.25 and kwargs["game"] == "pong"
    assert "frameskip" not in kwargs  # the preset skips 4 itself
    kwargs = vector_kwargs(registered, {"repeat_action_probability": 0.0})
    assert kwargs is not None and kwargs["repeat_action_probability"] == 0.0
    assert vector_kwargs(registered, {"mode": 0}) is None  # the vector env cannot express it
    assert vector_kwargs(registered, {"frameskip": 4}) is None  # refused later, by the single-env path


def test_the_preset_steps_on_ales_vector_env_unless_the_config_needs_single_envs():
    vector = make_vector_env(EnvSettings("ALE/Pong-v5", preprocessing="atari"), num_envs=2)
    try:
        assert isinstance(vector, GameScoreVector) and autoreset_mode(vector) == AutoresetMode.NEXT_STEP
        obs, _ = vector.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    finally:
        vector.close()
    single = make_vector_env(EnvSettings("ALE/Pong-v5", {"mode": 0}, "atari"), num_envs=2)
    try:
        assert isinstance(single, gym.vector.SyncVectorEnv)
    finally:
        single.close()


@pytest.mark.parametrize("action", [0, 2, 3])
def test_ales_vector_frames_equal_gymnasiums_preprocessing(action):
    """Same game, no sticky actions or no-op starts: every 84x84 max-pooled grayscale frame is identical."""
    import ale_py
    from ale_py.vector_env import AtariVectorEnv
    from gymnasium.wrappers import AtariPreprocessing

    gym.register_envs(ale_py)
    vector = AtariVectorEnv("pong", 1, num_threads=1, repeat_action_probability=0.0, noop_max=1,
                            use_fire_reset=False, reward_clipping=False)
    single = AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0), noop_max=0)
    try:
        stacked, _ = vector.reset(seed=0)
        frame, _ = single.reset(seed=0)
        assert np.array_equal(stacked[0, -1], frame)
        for _ in range(60):
            stacked, *_ = vector.step(np.array([action]))
            frame, *_ = single.step(action)
            assert np.array_equal(stacked[0, -1], frame)
    finally:
        vector.close()
        single.close()


def test_env_threads_step_the_same_games_as_one_thread():
    """rollouts.envThreads changes who steps the games, not what they show: same seed, same frames."""
    settings = EnvSettings("ALE/Pong-v5", {"repeat_action_probability": 0.0}, "atari")
    frames = []
    for threads in (1, 3):
        env = make_vector_env(settings, num_envs=3, threads=threads)
        obs, _ = env.reset(seed=5)
        steps = [obs]
        for t in range(12):
            obs, *_ = env.step(np.full(3, t % 6))
            steps.append(obs)
        env.close()
        frames.append(np.stack(steps))
    assert np.array_equal(frames[0], frames[1])


def test_env_groups_overlap_on_ale_and_sample_what_one_group_does():
    """With rollouts.envGroups: 2 each group's ALE vector env steps in the background (send, then recv while the
    policy acts for the other group), and the batches, resets after lost lives and game scores are exactly those
    of one group."""
    from kuberl.trainer.sampling.env_groups import EnvGroup
    from kuberl.trainer.sampling.rollout_worker import WorkerConfig
    from kuberl_testing.rollouts import assert_same_samples

    config = WorkerConfig("ALE/Breakout-v5", {"repeat_action_probability": 0.0}, num_envs=4, fragment_length=200,
                          seed=3, preprocessing="atari", env_threads=2)
    group = EnvGroup(make_vector_env(config.env, num_envs=2), slice(0, 2))
    assert group.overlaps
    group.close()
    assert_same_samples(config, 2, fragments=2)


@pytest.mark.parametrize(("configured", "workers", "envs", "cores", "expected"), [
    (None, 2, 16, 16, 1),     # rollout worker actors: each steps its envs on one thread
    (None, 0, 48, 16, 16),    # in the learner's process: every core
    (None, 0, 4, 16, 4),      # never more threads than envs
    (6, 0, 48, 16, 6),        # the manifest wins
    (3, 2, 16, 16, 3),
])
def test_env_threads_default(configured, workers, envs, cores, expected, monkeypatch):
    from kuberl.trainer.algorithms import base

    monkeypatch.setattr(base, "usable_cores", lambda: cores)  # the pod's cores, whatever this machine has
    assert base.env_threads(configured, workers, envs) == expected


def test_evaluation_presses_fire_after_a_lost_life_as_training_does():
    """Breakout waits for FIRE after a lost life. Training's single envs press it (episodic life ends the episode,
    FireReset starts the next); the evaluation env must too, or a policy that learnt so stalls with the ball out of
    play until the game is truncated. Here a policy that only ever does NOOP loses life after life."""
    from kuberl.trainer.sampling.envs import make_env

    env = make_env(EnvSettings("ALE/Breakout-v5", {"repeat_action_probability": 0.0}, "atari"), training=False)
    try:
        env.reset(seed=3)
        lives = [env.unwrapped.ale.lives()]
        for _ in range(3_000):
            _, _, terminated, truncated, _ = env.step(0)
            if env.unwrapped.ale.lives() != lives[-1]:
                lives.append(env.unwrapped.ale.lives())
            if terminated or truncated:
                break
    finally:
        env.close()
    assert len(lives) >= 3, lives  # the game went on past its first lost life


def test_a_termination_without_a_drop_in_lives_ends_the_game():
    """Some games end with lives left (a timer, a last level): ALE terminates with the lives unchanged. That is the
    game's end, not a lost life: its score is reported and the next game's starts from zero."""
    env = GameScoreVector(ScriptedGames([
        (5.0, False, 3), (2.0, True, 3),  # the game ends with three lives left
        (0.0, False, 3),  # the autoreset step
        (4.0, False, 3), (1.0, True, 2),  # a lost life, the game goes on
        (0.0, False, 2), (3.0, True, 2),  # ends with two lives left
    ]))
    env.reset(seed=0)
    scores, resets = [], []
    for _ in range(7):
        _, _, _, _, info = env.step(np.array([0]))
        scores.append(float(info["game_return"][0]) if info["_game_return"][0] else None)
        resets.append(bool(info[RESETS][0]))
    assert scores == [None, 7.0, None, None, None, None, 8.0]
    assert resets == [False, True, False, False, False, False, True]


def test_after_a_lost_life_fire_is_pressed_in_place_of_the_policys_action_and_is_no_transition():
    pressed = []

    class Recording(ScriptedGames):
        def step(self, actions):
            pressed.append(int(np.asarray(actions)[0]))
            return super().step(actions)

    env = GameScoreVector(Recording([(0.0, True, 2), (3.0, False, 2), (1.0, False, 2), (0.0, True, 0)]), fire=1)
    env.reset(seed=0)
    resets, scores = [], []
    for _ in range(4):
        _, _, _, _, info = env.step(np.array([0]))
        resets.append(bool(info[RESETS][0]))
        scores.append(float(info["game_return"][0]) if info["_game_return"][0] else None)
    assert pressed == [0, 1, 0, 0]
    assert resets == [True, False, False, True]  # the FIRE step, then the game over's reset
    assert scores == [None, None, None, 4.0]  # what FIRE scored counts in the game


def test_training_on_ales_vector_env_presses_fire_after_a_lost_life_as_evaluation_does():
    """Breakout waits for FIRE after a lost life; ALE's vector env presses it only when it resets a game. A policy
    that never presses FIRE must play the same game in training as in evaluation: life after life to the end, in
    about as many steps, and not stall with the ball out of play after its first lost life."""
    from kuberl.trainer.sampling.envs import make_env

    config = WorkerConfig("ALE/Breakout-v5", {"repeat_action_probability": 0.0}, num_envs=1, fragment_length=300,
                          preprocessing="atari", seed=0)
    worker = RolloutWorker(config, NoOpPolicy)
    try:
        batch = worker.sample()
    finally:
        worker.stop()
    d = batch.data
    ends = np.flatnonzero(d["terminateds"][:, 0])
    assert len(ends) >= 8  # two whole games of five lives, not one lost life and a wait
    np.testing.assert_array_equal(np.flatnonzero(~d["valid"][:, 0]), ends + 1)  # FIRE or reset: no transition
    training = [e["length"] for e in batch.episodes]
    evaluation = make_env(config.env, training=False)
    try:
        evaluation.reset(seed=0)
        for _ in range(1_000):
            _, _, terminated, truncated, info = evaluation.step(0)
            if terminated or truncated:
                break
    finally:
        evaluation.close()
    assert len(training) >= 2 and terminated
    assert all(abs(length - info["game_length"]) <= 15 for length in training), (training, info["game_length"])


def test_every_path_cuts_a_game_at_the_same_agent_step():
    """`max_num_frames_per_episode` counts frames on every path: ALE's vector env (whose docstring says steps)
    counts each of its frame-skip's frames, as ALE does under the single-env wrappers and in evaluation. 400
    frames: 100 agent steps, less the up to 30 no-op frames of the start where a path counts them."""
    from kuberl.trainer.sampling.atari import FRAME_SKIP, NOOP_MAX
    from kuberl.trainer.sampling.envs import make_env

    settings = EnvSettings("ALE/Pong-v5", {"repeat_action_probability": 0.0, "max_num_frames_per_episode": 400},
                           "atari")
    cut_at = {}
    vector = make_vector_env(settings, num_envs=1)
    assert isinstance(vector, GameScoreVector)
    try:
        vector.reset(seed=0)
        for step in range(1, 1_000):
            _, _, terminated, truncated, _ = vector.step(np.array([0]))
            if terminated[0] or truncated[0]:
                cut_at["vector"] = (step, bool(truncated[0]))
                break
    finally:
        vector.close()
    for training in (True, False):
        env = make_env(settings, training=training)
        try:
            env.reset(seed=0)
            for step in range(1, 1_000):
                _, _, terminated, truncated, _ = env.step(0)
                if terminated or truncated:
                    cut_at["training" if training else "evaluation"] = (step, truncated)
                    break
        finally:
            env.close()
    steps = 400 // FRAME_SKIP
    assert {path: truncated for path, (_, truncated) in cut_at.items()} == dict.fromkeys(
        ("vector", "training", "evaluation"), True)
    assert all(steps - NOOP_MAX // FRAME_SKIP - 1 <= step <= steps for step, _ in cut_at.values()), cut_at
