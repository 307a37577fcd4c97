"""The pytest fixtures of a test module that runs the real Kopf operator against the API emulator: one harness
for the module over its own namespaces, a fresh namespace for each test, and the loopback port of the trainers'
/status that the tests serve."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kuberl_testing.operator_harness import OperatorHarness
from kuberl_testing.ports import free_port


def operator_fixtures(prefix: str, count: int) -> tuple[int, Callable[[], Iterator[OperatorHarness]],
                                                        Callable[[], str]]:
    """`(status_port, harness, ns)`; assign them at module level under those names so pytest finds the
    fixtures. The namespaces are PREFIX-0 .. PREFIX-(count-1), one per test."""
    namespaces = [f"{prefix}-{i}" for i in range(count)]
    unused = iter(namespaces)
    status_port = free_port()

    @pytest.fixture(scope="module")
    def harness() -> Iterator[OperatorHarness]:
        with OperatorHarness(namespaces, env={"KUBERL_STATUS_PORT": str(status_port)}) as h:
            yield h

    @pytest.fixture
    def ns() -> str:
        name = next(unused, None)
        if name is None:
            raise RuntimeError(f"operator_fixtures({prefix!r}, {count}): more tests than namespaces; raise the count")
        return name

    return status_port, harness, ns
