"""Extraction-job notifications heard from PostgreSQL (migration 0012's trigger).

One `JobListener` per write-back server holds a dedicated connection that LISTENs on
`NEW_JOB_CHANNEL` (a job queued: wake a worker) and `DONE_JOB_CHANNEL` (a job done or
failed: wake whoever waits for it), and calls *on_new()* / *on_done(workspace_key,
job_id)*. It reconnects with backoff as `memplane.server.storage.invalidation` does, calling
*on_new()* after each LISTEN, since notifications sent while nobody listened are lost:
the workers then look for due jobs at once (and their slow poll covers the rest).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

import psycopg
from psycopg import sql

from memplane.server.background import cancel
from memplane.server.storage.jobs import DONE_JOB_CHANNEL, NEW_JOB_CHANNEL

_log = logging.getLogger(__name__)

RECONNECT_FIRST_SECONDS = 0.05
RECONNECT_MAX_SECONDS = 2.0
HEARTBEAT_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 2  # libpq's connect_timeout: whole seconds


class JobListener:
    """LISTENs for extraction jobs on its own connection to *dsn*. `start()` needs a
    running loop; `await stop()` ends it; both idempotent. Never raises from the task."""

    def __init__(self, dsn: str, *, on_new: Callable[[], None], on_done: Callable[[int, str], None]) -> None:
        self._dsn = dsn
        self._on_new = on_new
        self._on_done = on_done
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start listening in the background (no-op when running)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="memplane-job-listener")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        await cancel(task)

    async def _run(self) -> None:
        delay = RECONNECT_FIRST_SECONDS
        while True:
            try:
                await self._listen()
                delay = RECONNECT_FIRST_SECONDS
            except psycopg.Error as error:
                _log.debug("extraction job listener not listening (%s)", type(error).__name__)
            except Exception:  # a bug must not end the listener: the workers' poll still runs
                _log.exception("extraction job listener failed; restarting")
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)

    async def _listen(self) -> None:
        async with await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            application_name=f"memplane-jobs-{os.getpid()}",
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        ) as conn:
            for channel in (NEW_JOB_CHANNEL, DONE_JOB_CHANNEL):
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self._on_new()  # what was queued while nobody listened
            while True:
                async for notify in conn.notifies(timeout=HEARTBEAT_SECONDS):
                    if notify.channel == NEW_JOB_CHANNEL:
                        self._on_new()
                    else:
                        key, _, job_id = notify.payload.partition(":")
                        if key.isdigit():
                            self._on_done(int(key), job_id)
                await conn.execute("SELECT 1")  # a connection lost silently fails here
