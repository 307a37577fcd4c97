"""What building a user's env raised, as the field at fault (the single- and multi-agent env checks share it)."""

from __future__ import annotations

from kuberl.api.field_errors import FieldError


def env_construction_errors(env_id: str, exc: BaseException) -> list[FieldError]:
    """What creating a user's env raised, as the field at fault: its config refused, or anything else (an env
    module that exits on import must not end the trainer with its exit code)."""
    if isinstance(exc, TypeError):
        return [FieldError("spec.env.config", f"the env {env_id!r} does not accept it: {exc}")]
    if isinstance(exc, SystemExit):
        return [FieldError("spec.env.id", f"creating {env_id!r} failed: it called sys.exit({exc.code!r})")]
    return [FieldError("spec.env.id", f"creating {env_id!r} failed: {type(exc).__name__}: {exc}")]
