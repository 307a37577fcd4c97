"""The RLExperiment API types, their validation, and the CRD generated from them."""

from kuberl.api.field_errors import FieldError, ManifestError
from kuberl.api.types import API_VERSION, GROUP, KIND, PLURAL, VERSION, RLExperiment, RLExperimentSpec
from kuberl.api.validation import load_manifest, validate_document

__all__ = [
    "API_VERSION", "GROUP", "KIND", "PLURAL", "VERSION", "FieldError", "ManifestError", "RLExperiment",
    "RLExperimentSpec", "load_manifest", "validate_document",
]
