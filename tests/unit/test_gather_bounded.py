"""`memplane.eval.concurrency.gather_bounded`: results in job order, at most *limit* at
once, and on a failure the jobs not yet started are closed, not left un-awaited."""

from __future__ import annotations

import asyncio
import gc
import inspect
import warnings

import pytest

from memplane.eval.concurrency import gather_bounded


async def test_results_come_in_job_order_with_at_most_limit_running() -> None:
    running = peak = 0

    async def job(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        running -= 1
        return i

    assert await gather_bounded([job(i) for i in range(10)], 3) == list(range(10))
    assert peak == 3


async def test_a_failure_is_raised_as_is_and_the_jobs_not_started_are_closed() -> None:
    started: list[int] = []

    async def job(i: int) -> int:
        started.append(i)
        await asyncio.sleep(0)
        if i == 0:
            raise ValueError("job 0 failed")
        return i

    jobs = [job(i) for i in range(10)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="job 0 failed"):
            await gather_bounded(jobs, 2)
        assert len(started) < len(jobs)  # some never ran
        assert all(inspect.getcoroutinestate(j) == inspect.CORO_CLOSED for j in jobs)
        del jobs
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
