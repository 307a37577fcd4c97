"""The API's failures, rendered as the metav1.Status bodies clients check."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An API failure rendered as a metav1.Status with the reason strings clients check."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "code": self.code, "reason": self.reason, "message": self.message}
