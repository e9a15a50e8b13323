"""Bounded concurrency for the evaluation's RPC fan-out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def gather_bounded(jobs: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Await *jobs* with at most *limit* (>= 1) running at once; results in job order.

    On the first failure the remaining jobs are cancelled and that exception is raised
    as is (not wrapped in an ExceptionGroup), so callers can catch `MemplaneError`.
    """
    gate = asyncio.Semaphore(max(1, limit))

    async def guarded(job: Awaitable[T]) -> T:
        async with gate:
            return await job

    tasks = [asyncio.ensure_future(guarded(job)) for job in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
