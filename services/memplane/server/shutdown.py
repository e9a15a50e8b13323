"""A stop that always ends: each close step of the server runs for at most the time left
of one budget, and a step that has not finished by then is abandoned — cancelled, logged
at WARNING naming it, never waited for.

`memplane serve` stops in three phases (docs/operations/failure-behaviour.md#stopping):
the drain (`grpc.drain_seconds`), the grace in-flight calls get (`grpc.grace_period`,
`grpc.aio.Server.stop(grace)`), then the close (`grpc.close_seconds`): background jobs,
clients, connection pools (`psycopg_pool`'s own close timeout), the embedded PostgreSQL,
and the worker threads. A thread cannot be interrupted (a model call in C runs to its
end), so threads still busy when the budget is spent are left to the process's exit.
Bounds are asyncio's own: `asyncio.wait(timeout=...)` returns at the timeout whatever the
step does, where `asyncio.wait_for` would wait for a cancelled step to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

_log = logging.getLogger(__name__)

Step = tuple[str, Callable[[], Awaitable[object]]]
"""One close step: its name (for the log) and what starts it."""

_abandoned: set[asyncio.Task[object]] = set()  # cancelled, not awaited: referenced until they end


class Budget:
    """*seconds* from now (monotonic clock), shared by the steps of one stop."""

    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, seconds)
        self._deadline = time.monotonic() + self.seconds

    def left(self) -> float:
        """Seconds left, 0 once spent."""
        return max(0.0, self._deadline - time.monotonic())


async def bounded(what: str, step: Callable[[], Awaitable[object]], seconds: float) -> bool:
    """Run `step()` for at most *seconds*; True if it finished without error. A step still
    running then is cancelled and abandoned (WARNING "shutdown: <what> abandoned after N
    s"); one that raised is logged (ERROR, with its traceback). Returns within *seconds*
    (plus one turn of the event loop) whatever the step does, cancellation ignored
    included; with no time left (*seconds* <= 0) the step is not started. Raises nothing
    but the caller's own cancellation."""
    if seconds <= 0:
        _log.warning("shutdown: %s abandoned, not started: no time left", what)
        return False
    task: asyncio.Task[object] = asyncio.ensure_future(step())
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        _abandoned.add(task)
        task.add_done_callback(_forget)
        _log.warning("shutdown: %s abandoned after %.1f s", what, seconds)
        return False
    if task.cancelled():
        _log.warning("shutdown: %s was cancelled", what)
        return False
    error = task.exception()
    if error is not None:
        _log.error("shutdown: %s failed", what, exc_info=error)
        return False
    return True


def _forget(task: asyncio.Task[object]) -> None:
    _abandoned.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.debug("an abandoned shutdown step ended with %r", task.exception())


async def close_all(groups: Sequence[Sequence[Step]], budget: Budget) -> bool:
    """Run each group of steps in turn, the steps of one group concurrently; True if every
    step finished. A group gets at most an equal share of what is left of *budget* among
    the groups still to run (time a group does not use passes on), so one hung step
    cannot take the time of those after it; each step is `bounded` by its group's share."""
    finished = True
    groups = [group for group in groups if group]
    for index, group in enumerate(groups):
        share = budget.left() / (len(groups) - index)
        results = await asyncio.gather(*(bounded(what, step, share) for what, step in group))
        finished = finished and all(results)
    return finished


async def join_threads(executor: ThreadPoolExecutor, seconds: float) -> bool:
    """Shut *executor* down (work not started is cancelled) and wait up to *seconds* for its
    threads to finish what they run; True if they did. Otherwise WARNING, and the threads
    are left running: the caller's process should exit without them (`os._exit`), since
    the interpreter's own exit would wait for them without a bound."""
    loop = asyncio.get_running_loop()
    joined: asyncio.Future[None] = loop.create_future()

    def shutdown() -> None:
        executor.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, joined)

    # A daemon thread: if the wait below gives up, it must not hold the process either.
    threading.Thread(target=shutdown, name="memplane-shutdown-join", daemon=True).start()
    done, _ = await asyncio.wait({joined}, timeout=max(0.0, seconds))
    if not done:
        _log.warning(
            "shutdown: worker threads still busy after %.1f s (a model call cannot be interrupted); "
            "exiting without them",
            seconds,
        )
        return False
    return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
