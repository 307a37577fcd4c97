"""The errors Ray raises for a call on an actor that died."""

from __future__ import annotations


def actor_died_errors() -> tuple[type[BaseException], ...]:
    """The exception classes of a dead or unreachable actor that this Ray version has."""
    import ray.exceptions as rex

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError")
    return tuple(getattr(rex, name) for name in names if hasattr(rex, name))


class DeathsInARow:
    """Rollout worker deaths since a worker last delivered. Past `per_worker` deaths per worker in a row the run
    fails, naming the last cause, instead of replacing workers for ever: a worker that cannot start at all (an
    import error on its node, an env that fails to build there) would otherwise be replaced in a loop while the
    run makes no progress."""

    def __init__(self, workers: int, per_worker: int = 3):
        self.limit = per_worker * max(1, workers)
        self.count = 0

    def delivered(self) -> None:
        self.count = 0

    def died(self, error: BaseException, delivers: str) -> None:
        """Count a death; RuntimeError past the limit (`delivers`: what a live worker returns, for the message)."""
        self.count += 1
        if self.count > self.limit:
            raise RuntimeError(f"rollout workers died {self.count} times in a row without returning {delivers}; "
                               f"the last: {last_line(error)}") from None


def last_line(error: BaseException) -> str:
    """The last line of an error's message: a dead actor's message ends with its cause (`ImportError: ...`)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
