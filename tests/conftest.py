"""Markers by folder: tests/integration/ → `integration`, tests/e2e/ → `e2e`; unit tests
get a short timeout (they touch no database, no network and no model)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from memplane.server.logs import OWN_LOGGERS, QUIET_LOGGERS

_HERE = Path(__file__).parent
UNIT_TIMEOUT_SECONDS = 10  # generous for a loaded CI box; a unit test that waits on I/O fails fast


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.path)).relative_to(_HERE).parts
        if parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
        elif parts[0] == "e2e":
            item.add_marker(pytest.mark.e2e)
        elif parts[0] == "unit" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_SECONDS))


@pytest.fixture(autouse=True)
def _root_logger_as_found() -> Iterator[None]:
    """Each test leaves the root logger's handlers and level as it found them. A test that
    runs a CLI in-process (`memplane.server.logs.setup_logging`) replaces them with a handler on
    that test's captured stderr, which pytest closes when the test ends; the session's
    in-process operator (tests/e2e/operator, a thread that outlives the test) then logged
    into the closed stream ("--- Logging error --- ValueError: I/O operation on closed
    file" in CI's output). The levels it gives memplane's own and the quieted loggers are
    put back too (the warnings it routes into logging pytest puts back itself: each test
    runs inside `warnings.catch_warnings`)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    named = {name: logging.getLogger(name).level for name in (*OWN_LOGGERS, *QUIET_LOGGERS)}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in named.items():
        logging.getLogger(name).setLevel(was)
