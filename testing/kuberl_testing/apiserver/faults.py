"""Fault injection: fail chosen requests with an error status, for tests of retries and recovery."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kuberl_testing.apiserver.errors import ApiError


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int
    skip: int


class FaultInjector:
    """Rules of the form: let `skip` matching requests through, then fail the next `times`."""

    def __init__(self) -> None:
        self._faults: list[_Fault] = []
        self.hits = 0

    def add(self, method: str, path_pattern: str, status: int, times: int, skip: int) -> None:
        self._faults.append(_Fault(method.upper(), re.compile(path_pattern), status, times, skip))

    def clear(self) -> None:
        self._faults.clear()

    def check(self, method: str, path: str) -> ApiError | None:
        """The error to answer this request with, or None to serve it."""
        for fault in self._faults:
            if fault.times > 0 and method == fault.method and fault.pattern.search(path):
                if fault.skip > 0:
                    fault.skip -= 1
                    return None
                fault.times -= 1
                self.hits += 1
                return ApiError(fault.status, "InternalError", f"injected fault for {method} {path}")
        return None
