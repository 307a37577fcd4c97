"""bench/pong_peers.py: each peer's output read into (env steps, 100-game mean, games), and a peer stopped at the
goal (never before 100 games), at its env-step cap or at a signal, or refused with what is missing; the RLlib PPO
peer trains with the CPU Pong example's PPO values."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from bench import pong_peers
from bench.pong_peers import GameWindow, PeerCommand, RLlibGames, SampleFactoryReport, run_peer, thin

from kuberl.api.validation import hyperparams_for, load_manifest
from kuberl.trainer.run.task_defaults import resolve_task_defaults


def test_cleanrl_lines_give_the_mean_of_the_last_100_games():
    window = GameWindow()
    points = [window(f"global_step={100 * i}, episodic_return=[{-21.0 if i < 50 else 21.0}]") for i in range(150)]
    assert window("SPS: 300") is None
    assert points[0] == (0, -21.0, 1)
    assert points[99] == (9900, 0.0, 100)  # 50 games of -21, 50 of 21
    assert points[-1] == (14900, 21.0, 150)  # the first 50 have left the window


def test_sample_factory_frames_are_four_per_env_step():
    report = SampleFactoryReport()
    assert report("\x1b[36m[...] Fps is (10 sec: 409.6). Total num frames: 40960. Throughput: 0: 69.6.\x1b[0m") is None
    assert report("\x1b[37m[...] Avg episode reward: [(0, '-20.250')]\x1b[0m") == (10240, -20.25, None)


def test_rllib_lines_give_the_mean_of_the_last_100_games_across_iterations():
    games = RLlibGames()
    assert games('{"timesteps": 1024, "games": []}') is None
    assert games("2026-01-01 INFO worker.py: started") is None
    assert games('{"timesteps": 2048, "games": [-21.0, -20.0]}') == (2048, -20.5, 2)
    assert games(json.dumps({"timesteps": 4096, "games": [21.0] * 99})) == (4096, 21.0 - 41 / 100, 101)
    assert games.peer_count is None  # the line had no RLlib count
    games(json.dumps({"timesteps": 5120, "games": [21.0], "episodes_lifetime": 103}))
    assert (games.games, games.peer_count) == (102, 103)  # both kept for the summary, so a gap shows


def test_thin_keeps_one_point_a_period_and_the_last():
    points = [(float(s), s * 10, float(s), None) for s in range(0, 100, 10)]
    assert thin(points, every=30.0) == [[0.0, 0, 0.0], [0.5, 300, 30.0], [1.0, 600, 60.0], [1.5, 900, 90.0]]


def _fake_peer(monkeypatch, body: str, missing: list[str] | None = None) -> None:
    """A peer that runs `body` with this python: it prints CleanRL's lines, then would sleep past any test."""
    def command(peer, seed, sticky, workdir):
        return PeerCommand([sys.executable, "-c", body], {}, GameWindow(), "fake 1.0", 0.0, missing or [])
    monkeypatch.setattr(pong_peers, "peer_command", command)


GAMES = ("import sys, time\n"
         "for i in range(300):\n"
         "    print(f'global_step={1000 * (i + 1)}, episodic_return=[{18.0 if i < 60 else 19.0}]', flush=True)\n"
         "time.sleep(600)\n")


def test_a_peer_stops_at_the_goal_only_after_100_games(monkeypatch):
    _fake_peer(monkeypatch, GAMES)
    run = run_peer("cleanrl", 1, goal=18.0, cap=120.0, max_steps=None)["summary"]
    assert run["stopped"] == "goal" and run["games"] == 100 and run["env_steps_to_18"] == 100_000
    assert run["minutes_to_18"] is not None and run["peer_version"] == "fake 1.0"


def test_a_peer_stops_at_its_env_step_cap(monkeypatch):
    _fake_peer(monkeypatch, GAMES)
    run = run_peer("cleanrl", 1, goal=21.0, cap=120.0, max_steps=50_000)["summary"]
    assert run["stopped"] == "steps" and run["final_timesteps"] == 50_000 and run["minutes_to_21"] is None


def test_a_peer_stops_at_the_cap(monkeypatch):
    _fake_peer(monkeypatch, GAMES)
    run = run_peer("cleanrl", 1, goal=21.0, cap=1.0, max_steps=None)["summary"]
    assert run["stopped"] == "cap" and run["final_timesteps"] == 300_000


def test_a_peer_that_is_not_installed_is_refused_with_why(monkeypatch):
    _fake_peer(monkeypatch, GAMES, missing=["/nowhere/python missing"])
    run = run_peer("sample-factory", 1, goal=18.0, cap=120.0, max_steps=None)["summary"]
    assert "/nowhere/python missing" in run["error"] and "make bench-deps-pong-peers" in run["error"]


def test_an_unknown_peer_is_named():
    with pytest.raises(ValueError, match="--peer: 'dopamine'"):
        pong_peers.peer_command("dopamine", 1, 0.0, pong_peers.ROOT)


def test_rllib_ppo_peer_trains_with_the_cpu_pong_examples_ppo_values():
    example = Path(__file__).parents[2] / "examples" / "pong-ppo-cpu.yaml"
    resolved, defaults = resolve_task_defaults(load_manifest(example.read_text()), measure=False, cores=2)
    assert defaults is not None and defaults.kind == "image"
    params, spec = hyperparams_for(resolved), resolved.spec
    training = pong_peers.RLLIB_PPO_KUBERL["training"]
    runners = pong_peers.RLLIB_PPO_KUBERL["env_runners"]
    assert training["lr"] == [[0, params.lr], [spec.stop.timesteps, 0.0]] and params.anneal_lr
    assert (training["minibatch_size"], training["num_epochs"], training["clip_param"], training["entropy_coeff"],
            training["vf_loss_coeff"], training["grad_clip"], training["gamma"], training["lambda_"]) == \
        (params.minibatch_size, params.num_epochs, params.clip_param, params.entropy_coeff, params.vf_coeff,
         params.grad_clip, params.gamma, params.gae_lambda)
    assert training["train_batch_size_per_learner"] == spec.rollouts.envs_per_worker * spec.rollouts.fragment_length
    assert runners["num_env_runners"] * runners["num_envs_per_env_runner"] == spec.rollouts.envs_per_worker
    assert runners["rollout_fragment_length"] == spec.rollouts.fragment_length


def test_a_signal_stops_the_peers_whole_process_group_and_keeps_its_curve(monkeypatch):
    _fake_peer(monkeypatch, GAMES)
    stop = threading.Event()
    threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM)).start()  # as `kill PID` on the bench would
    started = time.monotonic()
    run = run_peer("cleanrl", 1, goal=21.0, cap=120.0, max_steps=None, stop=stop)["summary"]
    assert run["stopped"] == "interrupted" and stop.is_set()
    assert run["final_timesteps"] == 300_000 and time.monotonic() - started < 300  # a hang guard: not its 600 s sleep
