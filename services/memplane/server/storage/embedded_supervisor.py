"""The server supervises its embedded PostgreSQL: when the postmaster dies, start it again.

One task waits for the postmaster to exit — on a Linux pidfd (`os.pidfd_open`: readable
once the process has exited, so no polling; elsewhere its PID is polled every
POLL_SECONDS). Then it marks the database down at once (`Availability.lost`: RPCs get
UNAVAILABLE, each service's health NOT_SERVING — the same path as a DSN database that
went away) and restarts PostgreSQL with exponential backoff (RESTART_FIRST_SECONDS
doubling to RESTART_MAX_SECONDS), logging each attempt at WARNING with its reason. A
first attempt can fail while the killed postmaster's backends still hold its shared
memory; they exit as soon as they notice the postmaster's death. Once it runs,
`Availability`'s own probe reconnects, drops the broken pooled connections and serves
again — the server never restarts. Only for the embedded default: a DSN database is not
ours to restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from memplane.server.storage.availability import Availability
from memplane.server.storage.embedded import EmbeddedPostgres, EmbeddedPostgresError

_log = logging.getLogger(__name__)

RESTART_FIRST_SECONDS = 0.2  # backends of a killed postmaster usually exit within this
RESTART_MAX_SECONDS = 10.0  # one pg_ctl start per 10 s at worst while PostgreSQL cannot start
POLL_SECONDS = 0.5  # where there is no pidfd: how often the postmaster's PID is looked at


async def wait_exited(pid: int) -> None:
    """Return once process *pid* (not necessarily our child) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # not Linux ≥ 5.3
        while _signalable(pid):  # noqa: ASYNC110  # without a pidfd, a non-child's exit raises no event
            await asyncio.sleep(POLL_SECONDS)
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _signalable(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _report_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("embedded PostgreSQL no longer supervised", exc_info=task.exception())


class EmbeddedSupervisor:
    """Keeps the embedded PostgreSQL of *server* running for this process; `start()`,
    `await stop()`, then `await close()` at shutdown (which also releases *server*)."""

    def __init__(self, server: EmbeddedPostgres, availability: Availability) -> None:
        self._server = server
        self._availability = availability
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start watching (in the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="embedded-postgres-supervisor")
        self._task.add_done_callback(_report_end)

    async def _watch(self) -> None:
        while True:
            pid = await asyncio.to_thread(self._server.postmaster_pid)
            if pid is not None:
                await wait_exited(pid)
                reason = f"its postmaster (pid {pid}) exited"
            else:
                reason = "no postmaster running"
            self._availability.lost(f"embedded PostgreSQL down: {reason}")
            await self._restart(reason)

    async def _restart(self, reason: str) -> None:
        delay = RESTART_FIRST_SECONDS
        attempt = 1
        while True:
            _log.warning("restarting embedded PostgreSQL (attempt %d, %s)", attempt, reason)
            try:
                await asyncio.to_thread(self._server.restart)
            except EmbeddedPostgresError as error:
                reason = str(error)
                _log.warning(
                    "embedded PostgreSQL did not start (attempt %d): %s; next in %.1f s", attempt, reason, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESTART_MAX_SECONDS)
                attempt += 1
                continue
            _log.warning("embedded PostgreSQL running again (attempt %d)", attempt)
            return

    async def stop(self) -> None:
        """Stop watching (the server keeps running; idempotent)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self) -> None:
        """Stop watching, then release the server (stopping PostgreSQL if this process
        was its last holder). Raises `EmbeddedPostgresError` if `pg_ctl stop` fails."""
        await self.stop()
        await asyncio.to_thread(self._server.release)
