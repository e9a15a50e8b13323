"""The per-workspace limit of calls in flight and waiting (memplane.server.quota.concurrency)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError
from memplane.server.quota.concurrency import QUOTA_ID, ConcurrencyLimiter

_NOW = datetime(2026, 1, 1, tzinfo=UTC)
A = Workspace(key=1, name="a", embedding_model="m", embedding_dimensions=2, created_at=_NOW)
B = Workspace(key=2, name="b", embedding_model="m", embedding_dimensions=2, created_at=_NOW)


async def _until(predicate: Callable[[], bool]) -> None:
    """Yield to the loop until *predicate()* holds (the waiter has reached its line)."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_a_workspace_past_its_limit_and_queue_is_refused_and_others_are_not() -> None:
    limiter = ConcurrencyLimiter(2)
    held = [await limiter.acquire(A), await limiter.acquire(A)]
    with pytest.raises(QuotaExceededError) as refused:
        await limiter.acquire(A)
    assert (refused.value.quota_id, refused.value.limit, refused.value.subject) == (QUOTA_ID, 2, "workspace:a")
    await limiter.acquire(B)  # B's calls are counted apart
    held[0]()
    await limiter.acquire(A)  # a released slot is free again
    assert limiter.in_flight(A) == 2


async def test_calls_past_the_limit_wait_in_line_and_get_the_slots_in_order() -> None:
    limiter = ConcurrencyLimiter(1, queue=2)
    first = await limiter.acquire(A)
    second = asyncio.ensure_future(limiter.acquire(A))
    await _until(lambda: limiter.waiting(A) == 1)
    third = asyncio.ensure_future(limiter.acquire(A))
    await _until(lambda: limiter.waiting(A) == 2)
    with pytest.raises(QuotaExceededError):  # the line is full
        await limiter.acquire(A)
    assert not second.done()
    first()
    release_second = await second  # handed the slot, in arrival order
    assert not third.done()
    assert limiter.in_flight(A) == 1
    release_second()
    (await third)()
    assert (limiter.in_flight(A), limiter.waiting(A)) == (0, 0)


async def test_a_cancelled_waiter_leaves_the_line_and_takes_no_slot() -> None:
    limiter = ConcurrencyLimiter(1, queue=1)
    first = await limiter.acquire(A)
    waiter = asyncio.ensure_future(limiter.acquire(A))
    await _until(lambda: limiter.waiting(A) == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.waiting(A) == 0
    first()
    assert limiter.in_flight(A) == 0
    (await limiter.acquire(A))()  # the slot is free, not lost to the cancelled waiter


async def test_releasing_twice_frees_one_slot() -> None:
    limiter = ConcurrencyLimiter(1)
    release = await limiter.acquire(A)
    release()
    release()
    assert limiter.in_flight(A) == 0
    await limiter.acquire(A)
    with pytest.raises(QuotaExceededError):
        await limiter.acquire(A)


async def test_zero_is_unlimited_and_a_negative_limit_is_refused() -> None:
    limiter = ConcurrencyLimiter(0)
    for _ in range(1000):
        await limiter.acquire(A)
    with pytest.raises(ValueError, match="limit"):
        ConcurrencyLimiter(-1)
    with pytest.raises(ValueError, match="queue"):
        ConcurrencyLimiter(1, queue=-1)
