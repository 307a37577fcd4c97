"""The operator's per-experiment records and their reconcile queue, without a server."""

from __future__ import annotations

import asyncio
import logging

from kuberl.api.types import Phase
from kuberl.operator import experiments as queueing
from kuberl.operator.experiments import Experiment, ExperimentQueue

KEY = ("research", "cartpole")
LOG = logging.getLogger("test")


class Work:
    """Work that records each run and can be told to block or to fail."""

    def __init__(self, failures: int = 0):
        self.runs: list[Experiment] = []
        self.release = asyncio.Event()
        self.release.set()
        self.failures = failures

    async def __call__(self, record: Experiment) -> None:
        self.runs.append(record)
        await self.release.wait()
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the API is away")


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_triggers_during_a_run_coalesce_into_one_follow_up():
    async def scenario() -> list[Experiment]:
        work = Work()
        queue = ExperimentQueue(work)
        work.release.clear()
        first = asyncio.create_task(queue.reconcile(KEY, LOG))
        await _settle()  # the first run holds the lock
        followers = [asyncio.create_task(queue.reconcile(KEY, LOG)) for _ in range(5)]
        await _settle()
        work.release.set()
        await asyncio.gather(first, *followers)
        return work.runs

    runs = asyncio.run(scenario())
    assert len(runs) == 2  # the running one and one follow-up for five triggers
    assert runs[0] is runs[1]


def test_different_experiments_run_side_by_side():
    async def scenario() -> int:
        work = Work()
        queue = ExperimentQueue(work)
        work.release.clear()
        tasks = [asyncio.create_task(queue.reconcile(("ns", f"e{i}"), LOG)) for i in range(3)]
        await _settle()
        started = len(work.runs)
        work.release.set()
        await asyncio.gather(*tasks)
        return started

    assert asyncio.run(scenario()) == 3


def test_a_failed_run_is_retried_with_backoff_and_success_resets_the_count(monkeypatch):
    monkeypatch.setattr(queueing, "RETRY_BACKOFF", (0.01, 0.05))

    async def scenario() -> tuple[int, int]:
        work = Work(failures=2)
        queue = ExperimentQueue(work)
        queue.record(KEY).known = True
        await queue.reconcile(KEY, LOG)
        assert queue.get(KEY).failures == 1
        for _ in range(100):
            if len(work.runs) >= 3:
                break
            await asyncio.sleep(0.01)
        await _settle()
        return len(work.runs), queue.get(KEY).failures

    runs, failures = asyncio.run(scenario())
    assert runs == 3  # two failures, then the retry that succeeds; no retry after it
    assert failures == 0


def test_a_forgotten_experiment_is_not_retried(monkeypatch):
    monkeypatch.setattr(queueing, "RETRY_BACKOFF", (0.01, 0.05))

    async def scenario() -> int:
        work = Work(failures=1)
        queue = ExperimentQueue(work)
        queue.record(KEY).known = True
        await queue.reconcile(KEY, LOG)
        queue.forget(KEY)
        await asyncio.sleep(0.1)
        return len(work.runs)

    assert asyncio.run(scenario()) == 1


def test_an_experiment_known_only_from_its_pods_is_not_retried(monkeypatch):
    monkeypatch.setattr(queueing, "RETRY_BACKOFF", (0.01, 0.05))

    async def scenario() -> int:
        work = Work(failures=1)
        queue = ExperimentQueue(work)
        await queue.reconcile(KEY, LOG)  # a pod event: no event of the experiment itself yet
        await asyncio.sleep(0.1)
        return len(work.runs)

    assert asyncio.run(scenario()) == 1


def test_forgetting_is_one_deletion_and_a_waiting_trigger_of_the_forgotten_record_does_nothing():
    async def scenario() -> tuple[int, bool]:
        work = Work()
        queue = ExperimentQueue(work)
        record = queue.record(KEY)
        record.known, record.generation, record.phase, record.head_ip = True, 3, Phase.RUNNING, "10.0.0.7"
        record.next_poll, record.ensured, record.failures = 1.0, 3, 2
        work.release.clear()
        first = asyncio.create_task(queue.reconcile(KEY, LOG))
        await _settle()
        waiting = asyncio.create_task(queue.reconcile(KEY, LOG))
        await _settle()
        queue.forget(KEY)
        work.release.set()
        await asyncio.gather(first, waiting)
        return len(work.runs), queue.get(KEY) is None

    runs, gone = asyncio.run(scenario())
    assert gone
    assert runs == 1


def test_a_new_record_after_forget_starts_afresh():
    queue = ExperimentQueue(Work())
    record = queue.record(KEY)
    record.phase, record.generation, record.failures = Phase.FAILED, 4, 3
    queue.forget(KEY)
    fresh = queue.record(KEY)
    assert fresh is not record
    assert (fresh.phase, fresh.generation, fresh.failures, fresh.known) == (None, None, 0, False)
    assert len(queue) == 1


def test_phases_count_only_reconciled_experiments():
    queue = ExperimentQueue(Work())
    queue.record(("a", "x")).phase = Phase.RUNNING
    queue.record(("a", "y"))  # seen in a pod event only
    queue.record(("b", "x")).phase = Phase.SUCCEEDED
    assert queue.phases() == {("a", "x"): "Running", ("b", "x"): "Succeeded"}


def test_due_polls_come_each_on_their_own_schedule():
    queue = ExperimentQueue(Work())
    queue.record(("a", "early")).next_poll = 10.0
    queue.record(("a", "late")).next_poll = 20.0
    queue.record(("a", "unpolled"))
    assert [r.key for r in queue.due_polls(now=15.0, every=10.0)] == [("a", "early")]
    assert queue.get(("a", "early")).next_poll == 25.0
    assert queue.get(("a", "late")).next_poll == 20.0
    assert {r.key for r in queue.due_polls(now=25.0, every=10.0)} == {("a", "early"), ("a", "late")}
    assert queue.due_polls(now=26.0, every=10.0) == []



def test_a_poll_that_hangs_holds_up_no_other_experiments_polls(monkeypatch):
    """One experiment's pass waiting on a hung API call: the other experiment is still polled on its schedule,
    and the hung one is not polled again (no pile of passes) until its pass returns."""
    import kopf

    from kuberl.operator import handlers
    from kuberl.operator.settings import Settings

    slow, fast = ("research", "slow"), ("research", "fast")

    async def scenario() -> tuple[int, int]:
        hung, runs = asyncio.Event(), {slow: 0, fast: 0}

        async def work(record: Experiment) -> None:
            runs[record.key] += 1
            if record.key == slow:
                await hung.wait()

        memo = kopf.Memo()
        memo.settings = Settings(status_poll_seconds=0.01)
        memo.experiments = ExperimentQueue(work)
        for key in (slow, fast):
            memo.experiments.record(key).next_poll = 0.0
        loop = asyncio.create_task(handlers._poll_loop(memo, LOG))
        try:
            async with asyncio.timeout(60):  # a hang guard only
                while runs[fast] < 3:
                    await asyncio.sleep(0.01)
            slow_runs = runs[slow]
            hung.set()
        finally:
            loop.cancel()
        return slow_runs, runs[fast]

    monkeypatch.setattr(handlers, "POLL_TICK", 0.01)
    slow_runs, fast_runs = asyncio.run(scenario())
    assert fast_runs >= 3 and slow_runs == 1
