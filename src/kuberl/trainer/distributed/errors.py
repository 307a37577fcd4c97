"""The errors Ray raises for a call on an actor that died."""

from __future__ import annotations


def actor_died_errors() -> tuple[type[BaseException], ...]:
    """The exception classes of a dead or unreachable actor that this Ray version has."""
    import ray.exceptions as rex

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError")
    return tuple(getattr(rex, name) for name in names if hasattr(rex, name))
