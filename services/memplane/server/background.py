"""What every background task of the server shares: the `Job` shape the app starts and
stops them by, stopping one, and telling listeners of an up/down change (the database's
availability, an embedding endpoint's health)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

_log = logging.getLogger(__name__)

Listener = Callable[[bool], Awaitable[None]]
"""`await listener(up)` on every change of an up/down state."""


class Job(Protocol):
    """A background job of the process (a sweeper, a listener, the extraction workers, the
    embedded database's supervisor): `App.start()` starts each, `App.close()` stops each."""

    def start(self) -> None:
        """Start in the background (needs a running event loop); returns at once."""

    async def stop(self) -> None:
        """End the background work and wait until it has ended; a stopped job may be started again."""


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel *task* (None: nothing to do) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class Listeners:
    """The listeners of one up/down state, each told of every change in order; one that
    raises is logged and does not stop the others (nor the probe that called)."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._listeners: list[Listener] = []

    def add(self, listener: Listener) -> None:
        """Call `await listener(up)` on every change (not for the current state)."""
        self._listeners.append(listener)

    async def notify(self, up: bool) -> None:
        """Tell every listener that the state is now *up*."""
        for listener in self._listeners:
            try:
                await listener(up)
            except Exception:
                _log.exception("%s listener failed", self._what)


class JobGroup:
    """Several jobs started and stopped as one `Job`: the same job on each database
    cluster (a sweeper, a job listener). Started in order, stopped in reverse."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)

    def start(self) -> None:
        """Start every job (needs a running event loop)."""
        for job in self.jobs:
            job.start()

    async def stop(self) -> None:
        """Stop every job and wait until each has ended."""
        for job in reversed(self.jobs):
            await job.stop()


def one_job(jobs: Sequence[Job]) -> Job:
    """*jobs* as one `Job`: the job itself when there is one, else a `JobGroup`."""
    return jobs[0] if len(jobs) == 1 else JobGroup(jobs)
