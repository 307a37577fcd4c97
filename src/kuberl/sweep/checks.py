"""The checks of a sweep's template that need the trainer's libraries, as `kuberl validate` runs them for an
experiment: can the env be built and the algorithm act in it, do the callbacks import, do the task-kind
defaults fit. Run before any trial starts, so that a mistake in the template fails once, not in every
trial."""

from __future__ import annotations

from kuberl.api.field_errors import FieldError, ManifestError
from kuberl.api.sweep_types import RLSweep
from kuberl.api.sweep_validation import template_document, under_template
from kuberl.api.validation import validate_document


def template_env_errors(sweep: RLSweep) -> list[FieldError]:
    """The template's env checks, each error named under spec.template; empty where a trial can start."""
    from kuberl.trainer.run.checks import callbacks_errors, env_errors
    from kuberl.trainer.run.task_defaults import resolve_task_defaults

    experiment = validate_document(template_document(sweep.spec.template.to_manifest(exclude_unset=True), sweep.name))
    errors = env_errors(experiment) + callbacks_errors(experiment)
    if not errors:  # what `kuberl train` adds to each trial
        try:
            resolve_task_defaults(experiment, measure=False)
        except ManifestError as exc:
            errors = exc.errors
    return under_template(errors)
