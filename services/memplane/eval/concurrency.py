"""Bounded concurrency for the evaluation's RPC fan-out."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def gather_bounded(jobs: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Await *jobs* with at most *limit* (>= 1) running at once; results in job order.

    On the first failure the remaining jobs are cancelled and that exception is raised
    as is (not wrapped in an ExceptionGroup), so callers can catch `MemplaneError`. A
    coroutine job cancelled before it started is closed (no "coroutine ... was never
    awaited" warning).
    """
    gate = asyncio.Semaphore(max(1, limit))

    async def guarded(job: Awaitable[T]) -> T:
        async with gate:
            return await job

    pending = list(jobs)
    tasks = [asyncio.ensure_future(guarded(job)) for job in pending]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for job in pending:
            if inspect.iscoroutine(job):
                job.close()  # a no-op on one that ran; closes one cancelled waiting at the gate
        raise
