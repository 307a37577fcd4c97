"""The terminal's progress bar: which stop criterion it follows, what it shows beside it, its ETA."""

from __future__ import annotations

import io

from kuberl.api.types import StopSpec
from kuberl.trainer.iteration_result import IterationResult
from kuberl.trainer.run.progress import Progress
from kuberl.trainer.run.progress_bar import StopBar, bar_postfix, countable_criteria, leading_criterion


def result(iteration: int, timesteps: int, seconds: float, **extra: object) -> IterationResult:
    return IterationResult.from_json({"iteration": iteration, "timesteps": timesteps, "timeSeconds": seconds,
                                      "envStepsPerSecond": 1234.4, "episodeReturnMean": 21.25, **extra})


def frames(out: io.StringIO) -> list[str]:
    return [frame for frame in out.getvalue().replace("\n", "\r").split("\r") if frame.strip()]


def test_the_bar_follows_the_criterion_closest_to_done():
    criteria = countable_criteria(StopSpec(timesteps=100_000, iterations=50, time_seconds=600))
    assert leading_criterion(criteria, result(10, 10_000, 30.0)).name == "iterations"  # 20% against 10% and 5%
    assert leading_criterion(criteria, result(10, 30_000, 30.0)).name == "timesteps"
    assert leading_criterion(criteria, result(10, 10_000, 300.0)).name == "timeSeconds"
    assert leading_criterion(countable_criteria(StopSpec(episode_return_mean=200)), result(1, 1, 1.0)) is None


def test_the_postfix_shows_steps_per_second_and_the_returns_beside_their_targets():
    stop = StopSpec(timesteps=1000, episode_return_mean=195, evaluation_return_mean=400)
    assert bar_postfix(stop, result(1, 10, 1.0)) == "1,234 steps/s, return 21.2 -> 195, eval - -> 400"
    evaluated = result(1, 10, 1.0, episodeReturnMean=None, evaluation={"returnMean": 310.0})
    assert bar_postfix(StopSpec(timesteps=1000), evaluated) == "1,234 steps/s, return -, eval 310.0"


def test_the_eta_is_the_rate_since_the_first_result():
    out = io.StringIO()
    bar = StopBar(out, StopSpec(timesteps=10_000, iterations=1000))
    bar.update(result(1, 1_000, 2.0))
    assert bar.bar is not None
    bar.bar.start_t -= 100  # 100 s since the first result: 1,000 steps in them, 10 steps/s
    bar.update(result(2, 2_000, 102.0), final=True)
    last = frames(out)[-1]
    assert last.startswith("timesteps  20%|"), last
    assert "| 2.00k/10.0k [01:40<13:20, 1,234 steps/s, return 21.2]" in last  # 8,000 steps at 10 a second


def test_the_bar_switches_criterion_and_keeps_its_start():
    out = io.StringIO()
    bar = StopBar(out, StopSpec(timesteps=10_000, time_seconds=100))
    bar.update(result(1, 1_000, 5.0))  # timesteps 10%, time 5%
    assert bar.following is not None and bar.following.name == "timesteps"
    assert bar.bar is not None
    bar.bar.start_t -= 50
    bar.update(result(2, 2_000, 55.0), final=True)  # timesteps 20%, time 55%: time ends the run first
    assert bar.following is not None and bar.following.name == "timeSeconds"
    last = frames(out)[-1]
    assert last.startswith("timeSeconds  55%|"), last
    assert "| 55/100 [00:50<00:45," in last  # 50 s of training time in 50 s since the first result
    bar.close()


def test_return_targets_alone_get_a_counter_of_iterations():
    out = io.StringIO()
    bar = StopBar(out, StopSpec(episode_return_mean=195))
    bar.update(result(3, 300, 1.0), final=True)
    assert frames(out)[-1].startswith("iterations 3 [00:00, 1,234 steps/s, return 21.2 -> 195]")
    bar.close()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_the_bar_on_a_terminal_and_plain_lines_elsewhere():
    stop = StopSpec(iterations=2)
    on_terminal, in_log = Terminal(), io.StringIO()
    for out in (on_terminal, in_log):
        progress = Progress(out, quiet=False, in_cluster=False, stop=stop)
        progress.on_iteration_end(result(1, 100, 1.0), stopping=False)
        progress.on_iteration_end(result(2, 200, 2.0), stopping=True)
        progress.on_loop_end()
    assert "iterations 100%|" in on_terminal.getvalue() and "iter " not in on_terminal.getvalue()
    assert in_log.getvalue().splitlines()[-1].startswith("iter     2 | steps         200 |")
    assert "%|" not in in_log.getvalue()
    quiet = Terminal()
    progress = Progress(quiet, quiet=True, in_cluster=False, stop=stop)
    progress.on_iteration_end(result(2, 200, 2.0), stopping=True)
    progress.on_loop_end()
    assert quiet.getvalue() == ""


def test_a_multi_agent_run_shows_its_policies_returns_beside_the_bar():
    out = Terminal()
    progress = Progress(out, quiet=False, in_cluster=False, stop=StopSpec(iterations=2))
    policies = {"adversary": {"episodeReturnMean": -3.5}, "agent": {"episodeReturnMean": 7.25}}
    progress.on_iteration_end(result(2, 200, 2.0, policies=policies), stopping=True)
    progress.on_loop_end()
    assert "return 21.2 | adversary -3.5, agent 7.2]" in out.getvalue()
