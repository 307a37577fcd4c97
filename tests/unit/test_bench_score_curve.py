"""bench/score_curve.py: a long benchmark stopped with Ctrl-C or SIGTERM ends its iteration, keeps its curve and
starts no further run."""

from __future__ import annotations

import os
import signal
import threading

from bench.score_curve import stop_requests, summary, train_to_score, worst_seed


class FakeAlgorithm:
    """An algorithm whose third iteration receives SIGINT, as a user's Ctrl-C would arrive mid-iteration."""

    def __init__(self) -> None:
        self.iterations = 0
        self.stopped = False

    def train(self) -> dict:
        self.iterations += 1
        if self.iterations == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return {"episodeReturnMean": -21.0 + self.iterations, "episodes": 100 * self.iterations,
                "timesteps": 1024 * self.iterations, "sampler": {}, "learner": {}}

    def stop(self) -> None:
        self.stopped = True


class FakeConfig:
    def __init__(self) -> None:
        self.algorithm = FakeAlgorithm()

    def build(self) -> FakeAlgorithm:
        return self.algorithm


def test_sigint_ends_the_run_after_its_iteration_with_the_curve_kept() -> None:
    before = signal.getsignal(signal.SIGINT)
    config = FakeConfig()
    run = train_to_score(config, goal=18.0, cap_seconds=3600.0, print_every=1000)
    assert [row["timesteps"] for row in run.rows] == [1024, 2048, 3072]
    assert run.interrupted and run.reached is None and config.algorithm.stopped
    assert summary(run, 18.0)["stopped"] == "interrupted"
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is back


def test_a_run_at_its_goal_ends_there_unmarked() -> None:
    config = FakeConfig()
    run = train_to_score(config, goal=-19.0, cap_seconds=3600.0, print_every=1000)
    assert len(run.rows) == 2 and run.reached is run.rows[-1] and not run.interrupted
    assert "stopped" not in summary(run, -19.0)


def _seed(seed: int, minutes: float | None, score: float | None) -> dict[str, object]:
    return {"seed": seed, "minutes_to_18": minutes, "final_score": score}


def test_the_worst_seed_is_one_that_missed_the_goal_then_the_lowest_score_then_the_slowest():
    assert worst_seed([_seed(1, 40.0, 18.1), _seed(2, 73.5, 18.0), _seed(3, 36.3, 18.0)], 18)["seed"] == 2
    assert worst_seed([_seed(1, 90.0, 18.0), _seed(2, None, 17.2), _seed(3, None, 12.0)], 18)["seed"] == 3
    # a run stopped before its first 100 games has no score: it missed the goal by the most
    assert worst_seed([_seed(1, None, 17.24), _seed(2, None, None), _seed(3, 36.3, 18.0)], 18)["seed"] == 2


def test_a_signal_during_a_run_also_sets_the_series_stop_and_a_set_stop_ends_the_next_run() -> None:
    stop = threading.Event()
    first = train_to_score(FakeConfig(), goal=18.0, cap_seconds=3600.0, print_every=1000, stop=stop)
    assert first.interrupted and stop.is_set()
    second = FakeConfig()
    run = train_to_score(second, goal=18.0, cap_seconds=3600.0, print_every=1000, stop=stop)
    assert len(run.rows) == 1 and run.interrupted and second.algorithm.stopped


def test_stop_requests_calls_back_and_puts_the_handler_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    called = []
    with stop_requests(on_stop=lambda: called.append(True)) as requested:
        os.kill(os.getpid(), signal.SIGTERM)
        assert requested.wait(5.0)
    assert called == [True] and signal.getsignal(signal.SIGTERM) is before
