"""Whether the database answers, as this process last saw it, and the probe that notices
when it is back.

A pool does not know its server died: after PostgreSQL is killed or restarted, every
pooled connection is broken, and each new checkout waits for the pool timeout (30 s)
while the pool fails to reconnect in the background. Instead, the first connection-level
error (`psycopg.OperationalError` other than a statement timeout, or a pool that could
not connect) marks the database *down*: from then on, a request waits at most
RECOVERY_WAIT_SECONDS for it to come back, then fails with UNAVAILABLE (well within any
deadline) instead of queueing for a connection, and one probe task connects afresh with
exponential backoff (PROBE_FIRST_SECONDS doubling to PROBE_MAX_SECONDS). When a probe
connects and `SELECT 1` answers, the pool drops its broken idle connections
(`AsyncConnectionPool.check`) and the database is *up* again — no server restart.
Listeners (the gRPC health service) hear every change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import psycopg

from memplane.errors import MemplaneError
from memplane.server.background import Listener, Listeners, cancel

_log = logging.getLogger(__name__)

PROBE_FIRST_SECONDS = 0.05
PROBE_MAX_SECONDS = 0.5  # one connection attempt per half second while down: cheap, and a restart is seen soon
RECOVERY_WAIT_SECONDS = 0.5  # a request arriving while down waits this long for the probe before UNAVAILABLE


class Availability:
    """Up/down state of one database, with the probe that brings it back up."""

    def __init__(
        self, dsn: str, *, recover: Callable[[], Awaitable[None]], connect_timeout: float = 2.0, name: str = ""
    ) -> None:
        """*recover*: run once a probe succeeded, before the state is up (drops broken
        pooled connections). *connect_timeout*: seconds a probe's connect may take.
        *name*: the database cluster's, named in its messages and log lines ("": one
        database, unnamed)."""
        self._what = f"database cluster {name!r}" if name else "database"
        self._dsn = dsn
        self._recover = recover
        self._connect_timeout = max(1, round(connect_timeout))
        self._down_since: float | None = None
        self._back = asyncio.Event()
        self._reason = ""
        self._probe: asyncio.Task[None] | None = None
        self._listeners = Listeners("availability")

    @property
    def up(self) -> bool:
        return self._down_since is None

    def describe(self) -> str:
        """Why requests are refused, for their UNAVAILABLE message."""
        if self._down_since is None:
            return f"{self._what} reachable"
        return f"{self._what} unreachable for {time.monotonic() - self._down_since:.1f} s ({self._reason})"

    async def wait_up(self, seconds: float = RECOVERY_WAIT_SECONDS) -> bool:
        """Whether the database is up, waiting up to *seconds* for the probe if it is down."""
        if self._down_since is None:
            return True
        try:
            async with asyncio.timeout(seconds):
                await self._back.wait()
        except TimeoutError:
            return False
        return self._down_since is None

    def listen(self, listener: Listener) -> None:
        """Call `await listener(up)` on every change (not for the current state)."""
        self._listeners.add(listener)

    def lost(self, reason: str) -> None:
        """A connection-level error was seen: mark down (once) and start probing."""
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        self._back.clear()
        self._reason = reason
        _log.warning("%s unreachable (%s): refusing requests, probing until it answers", self._what, reason)
        self._probe = asyncio.get_running_loop().create_task(self._run_probe())

    async def _run_probe(self) -> None:
        await self._listeners.notify(False)
        delay = PROBE_FIRST_SECONDS
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, connect_timeout=self._connect_timeout
                )
                async with conn:
                    await conn.execute("SELECT 1")
                await self._recover()
            except (psycopg.Error, OSError, MemplaneError) as error:  # MemplaneError: *recover* refused it
                self._reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                _log.info("%s probe failed: %s; next in %.2f s", self._what, self._reason, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, PROBE_MAX_SECONDS)
                continue
            break
        down_for = time.monotonic() - (self._down_since or time.monotonic())
        self._down_since = None
        self._back.set()
        self._probe = None
        _log.warning("%s reachable again after %.1f s: serving", self._what, down_for)
        await self._listeners.notify(True)

    async def close(self) -> None:
        """Stop probing (at shutdown)."""
        probe, self._probe = self._probe, None
        await cancel(probe)
