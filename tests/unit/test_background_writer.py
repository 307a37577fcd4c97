"""The background writer and the result sinks it feeds: in order, retried, coalesced by key, never blocking."""

from __future__ import annotations

import threading

from kuberl.trainer.iteration_result import IterationResult
from kuberl.trainer.run.sinks import ResultSinks
from kuberl.trainer.storage.background import BackgroundWriter


def line(iteration: int) -> IterationResult:
    return IterationResult.from_json({"iteration": iteration, "timesteps": 0})


HANG_GUARD_SECONDS = 30.0  # only a hang guard: every wait here ends on an event, in milliseconds when all is well


class FlakySink:
    """Fails the first `failures` writes, then records; blocks while `gate` is closed."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.seen: list[int] = []
        self.closed = False
        self.gate = threading.Event()
        self.gate.set()

    def write(self, result: IterationResult) -> None:
        self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise ConnectionError("tracking server down")
        self.seen.append(result.iteration)

    def close(self) -> None:
        self.closed = True


def test_a_failing_sink_is_retried_and_sees_every_result_in_order():
    background = BackgroundWriter(max_backoff_seconds=0.05)
    sink, healthy = FlakySink(failures=2), FlakySink()
    sinks = ResultSinks([sink, healthy], background)
    for i in range(1, 6):
        sinks.write(line(i))
    sinks.close()
    background.close(timeout=10)
    assert sink.seen == healthy.seen == [1, 2, 3, 4, 5]
    assert sink.closed and healthy.closed
    assert background.failures == 2 and isinstance(background.last_error, ConnectionError)


def test_submitting_never_waits_for_a_slow_job():
    background = BackgroundWriter()
    sink = FlakySink()
    sink.gate.clear()  # the sink hangs until the test opens the gate
    sinks = ResultSinks([sink], background)
    written = threading.Event()
    writer = threading.Thread(target=lambda: ([sinks.write(line(i)) for i in range(100)], written.set()))
    writer.start()
    assert written.wait(HANG_GUARD_SECONDS), "sinks.write waited for the hanging sink"  # a hang guard
    assert sink.seen == [] and not background.wait(timeout=0.2)  # every write returned while the sink hung
    sink.gate.set()
    assert background.wait(timeout=10) and sink.seen == list(range(100))
    background.close()


def _start_blocker(background: BackgroundWriter, gate: threading.Event) -> None:
    """Submit a job that holds the writer until `gate` opens; return once it runs."""
    running = threading.Event()
    background.submit("blocker", lambda: (running.set(), gate.wait(HANG_GUARD_SECONDS)))
    assert running.wait(HANG_GUARD_SECONDS), "the blocker never ran"  # a hang guard


def test_beyond_its_limit_the_oldest_jobs_are_dropped_and_counted():
    background = BackgroundWriter(max_jobs=3)
    gate = threading.Event()
    done: list[int] = []
    _start_blocker(background, gate)
    for i in range(6):
        background.submit(f"job {i}", lambda i=i: done.append(i))
    gate.set()
    background.close(timeout=10)
    assert background.dropped == 3 and done == [3, 4, 5]  # the newest three waited; the running one finished


def test_a_keyed_job_replaces_the_one_of_its_key_still_waiting():
    background = BackgroundWriter()
    gate = threading.Event()
    done: list[str] = []
    _start_blocker(background, gate)
    for i in range(5):
        assert background.submit(f"state {i}", lambda i=i: done.append(f"state {i}"), key="state")
    background.submit("other", lambda: done.append("other"))
    gate.set()
    assert background.wait(timeout=10)
    background.close()
    assert done == ["state 4", "other"]  # the newest state, in the place of the first one queued


def test_a_failing_keyed_job_gives_way_to_a_newer_one_after_its_backoff():
    background = BackgroundWriter(max_backoff_seconds=0.2)
    attempts: list[int] = []
    started = threading.Event()

    def write(i: int) -> None:
        attempts.append(i)
        started.set()
        if i == 1:
            raise ConnectionError("store down")

    background.submit("state 1", lambda: write(1), key="state")
    assert started.wait(timeout=10)
    background.submit("state 2", lambda: write(2), key="state")
    assert background.wait(timeout=10)
    background.close()
    assert attempts[-1] == 2 and attempts.count(2) == 1 and background.failures == attempts.count(1)


def test_a_delayed_job_waits_until_due_or_hurried():
    background = BackgroundWriter()
    done: list[str] = []
    background.submit("later", lambda: done.append("later"), delay=3600)
    assert not background.wait(timeout=0.2) and done == []
    background.hurry()
    assert background.wait(timeout=10) and done == ["later"]
    background.submit("soon", lambda: done.append("soon"), key="k", delay=3600)
    background.submit("sooner", lambda: done.append("sooner"), key="k", delay=0.05)  # the earlier time wins
    assert background.wait(timeout=10) and done == ["later", "sooner"]
    background.close()


def test_an_error_it_must_stop_on_ends_the_writer_and_drops_what_waits():
    class Fenced(Exception):
        pass

    background = BackgroundWriter(stop_on=(Fenced,))
    gate = threading.Event()
    done: list[int] = []

    def fenced() -> None:
        gate.wait()
        raise Fenced("a newer attempt owns the run")

    background.submit("fenced", fenced)
    background.submit("after", lambda: done.append(1))
    gate.set()
    assert background.wait(timeout=10)
    assert isinstance(background.stopped_by, Fenced) and background.failures == 0 and done == []
    assert not background.submit("later", lambda: done.append(2))
    background.close()
