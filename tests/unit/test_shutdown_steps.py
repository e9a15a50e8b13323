"""`memplane.server.shutdown`: a close step never holds a stop past its bound — one that
ignores cancellation included — and each abandoned or failed step is logged by name."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from memplane.server.shutdown import Budget, bounded, close_all, join_threads

BOUND = 0.2  # seconds a hung step is given
SLACK = 2.0  # what a loaded 2-core machine may add to it


async def _finishes() -> None:
    await asyncio.sleep(0)


async def _fails() -> None:
    raise RuntimeError("broken close")


async def _ignores_cancellation(ended: asyncio.Event) -> None:
    """A step that swallows every cancellation until *ended* is set (what `asyncio.wait_for` would wait on)."""
    while not ended.is_set():
        try:
            await ended.wait()
        except asyncio.CancelledError:
            continue


async def test_a_step_that_finishes_is_true_and_silent(caplog: pytest.LogCaptureFixture) -> None:
    assert await bounded("closing a thing", _finishes, BOUND)
    assert not [r for r in caplog.records if r.name == "memplane.server.shutdown"]


async def test_a_step_that_ignores_cancellation_is_abandoned_within_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended = asyncio.Event()
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="memplane.server.shutdown"):
            assert not await bounded("stopping a stubborn job", lambda: _ignores_cancellation(ended), BOUND)
        assert BOUND <= time.monotonic() - started < BOUND + SLACK
        assert "shutdown: stopping a stubborn job abandoned after 0.2 s" in caplog.text
    finally:
        ended.set()  # let it end: nothing of it outlives the test


async def test_a_failing_step_is_logged_with_its_error(caplog: pytest.LogCaptureFixture) -> None:
    assert not await bounded("closing the pool", _fails, BOUND)
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == "shutdown: closing the pool failed"
    assert record.exc_info is not None
    assert "broken close" in str(record.exc_info[1])


async def test_steps_share_one_budget_and_later_ones_still_run_when_one_hangs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended = asyncio.Event()
    ran: list[str] = []

    async def record(name: str) -> None:
        ran.append(name)

    started = time.monotonic()
    try:
        finished = await close_all(
            [
                [("stopping job a", lambda: _ignores_cancellation(ended)), ("stopping job b", lambda: record("b"))],
                [("closing the pool", lambda: record("pool"))],
            ],
            Budget(2 * BOUND),
        )
        assert not finished
        assert time.monotonic() - started < 2 * BOUND + SLACK
        assert ran == ["b", "pool"]  # b ran beside the hung step; the pool after it, in the half left
        assert "stopping job a abandoned after 0.2 s" in caplog.text
    finally:
        ended.set()


async def test_a_spent_budget_starts_nothing() -> None:
    ran: list[str] = []

    async def record() -> None:
        ran.append("ran")

    assert not await close_all([[("closing late", record)]], Budget(0))
    assert ran == []


async def test_busy_worker_threads_are_left_after_the_bound_idle_ones_joined() -> None:
    idle = ThreadPoolExecutor(max_workers=2)
    idle.submit(lambda: None).result()
    assert await join_threads(idle, 5.0)

    release = threading.Event()
    busy = ThreadPoolExecutor(max_workers=1)
    busy.submit(release.wait)  # an uninterruptible call, as a model's is
    queued = busy.submit(lambda: None)
    started = time.monotonic()
    try:
        assert not await join_threads(busy, BOUND)
        assert time.monotonic() - started < BOUND + SLACK
        assert queued.cancelled()  # work not started is dropped, not run at exit
    finally:
        release.set()
