"""Secret NAME-ray-token: the Ray cluster's auth token (generated once, kept across head restarts)."""

from __future__ import annotations

import base64
import secrets
from typing import Any

from kuberl.operator import names
from kuberl.operator.builders.common import Owner, metadata

TOKEN_KEY = "token"


def new_token() -> str:
    """A fresh random token; the only impure step, kept out of the builder."""
    return secrets.token_urlsafe(32)


def build_token_secret(owner: Owner, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata(owner, names.token_secret_name(owner.name)),
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }
