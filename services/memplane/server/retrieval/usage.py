"""Searches per workspace and UTC day, counted so that the search path pays nothing
measurable: a search adds 1 to an in-memory count of (workspace key, UTC day) — a dict
increment, no I/O — and a background task adds each workspace's counts to the database
(table search_counts, migration 0019) every `retrieval.search_count_flush_seconds`, one
UPSERT per (workspace, day), and once more when the process stops gracefully. A process
killed without its shutdown (SIGKILL, a crash, an OOM kill) loses at most the searches
counted since its last flush; a flush the database refuses is kept and retried at the
next one.

What counts as a search (docs/guides/console.md, "Usage"): each SearchMemories and each
SelectMemoryFiles call the retrieval service answered without an error, once whatever
the number of its queries. Calls refused (bad input, a quota, no database) are not
searches. PrepareContext reads no memories (it checks, compacts and summarises the
context it is given) and is not counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from memplane.domain.models import Workspace
from memplane.errors import FieldViolation, InvalidArgumentError, WorkspaceDeletedError
from memplane.server.background import cancel
from memplane.server.storage.routing import TenantDatabase
from memplane.server.storage.search_counts import DailyCounts, add_searches, daily_counts

_log = logging.getLogger(__name__)

MAX_DAYS = 60
"""Days a daily usage request may cover, today included."""

DEFAULT_DAYS = 14
"""Days of a request that leaves `days` at 0."""


def _today() -> date:
    return datetime.now(UTC).date()


class SearchCounter:
    """The searches of this process not yet in the database, by (workspace key, UTC day),
    and the background job that moves them there (`memplane.server.background.Job`).
    *today* is the clock (tests move it across midnight)."""

    def __init__(
        self, db: TenantDatabase, *, interval_seconds: float = 5.0, today: Callable[[], date] = _today
    ) -> None:
        self._db = db
        self._interval = interval_seconds
        self._today = today
        self._pending: dict[tuple[int, date], int] = {}
        self._task: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()  # one flush at a time: a reader's waits for one in flight

    def count(self, workspace_key: int) -> None:
        """One search of the workspace, today (UTC): a dict increment, nothing else."""
        key = (workspace_key, self._today())
        self._pending[key] = self._pending.get(key, 0) + 1

    def pending(self) -> int:
        """Searches counted and not yet flushed, all workspaces together."""
        return sum(self._pending.values())

    async def flush(self, workspace_key: int | None = None) -> None:
        """Add the counted searches (of *workspace_key* only, when given) to the database,
        one statement per (workspace, day), one flush at a time (so a reader's flush returns
        after one already in flight has written: GetDailyUsage sees every search this
        process counted); each is taken out of the pending counts before its statement is
        sent, so a search counted meanwhile waits for the next flush, and put back when
        the database refuses it (the error is logged, then raised after the others ran);
        a deleted workspace's are dropped."""
        async with self._flushing:
            keys = [k for k in self._pending if workspace_key is None or k[0] == workspace_key]
            failed: Exception | None = None
            for key in keys:
                n = self._pending.pop(key, 0)
                if not n:
                    continue
                try:
                    await add_searches(self._db, key[0], key[1], n)
                except WorkspaceDeletedError:
                    continue  # its counts went with it: nothing to keep, nothing to retry
                except Exception as exc:
                    self._pending[key] = self._pending.get(key, 0) + n
                    failed = failed or exc
        if failed is not None:
            raise failed

    def start(self) -> None:
        """Flush every `interval_seconds` in the background (needs a running event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="memplane-search-counter")

    async def stop(self) -> None:
        """Stop the periodic flush, then flush what is left (graceful shutdown: nothing
        counted is lost unless the database refuses it, which is logged)."""
        task, self._task = self._task, None
        await cancel(task)
        try:
            await self.flush()
        except Exception:
            _log.exception("the last flush of %d searches failed; they are lost", self.pending())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except Exception as exc:
                _log.warning("flushing %d searches failed (retried in %.1f s): %s", self.pending(), self._interval, exc)


class DailyUsage:
    """A workspace's searches and memories added per UTC day (GetDailyUsage)."""

    def __init__(self, db: TenantDatabase, counter: SearchCounter, *, today: Callable[[], date] = _today) -> None:
        self._db = db
        self._counter = counter
        self._today = today

    async def days(self, workspace: Workspace, days: int) -> list[DailyCounts]:
        """The last *days* (1 to `MAX_DAYS`; 0: `DEFAULT_DAYS`) UTC days, oldest first,
        today (so far) included. This process's own pending searches of the workspace are
        flushed first, so a caller sees its searches at once; other retrieval processes'
        within their flush interval. Read on the primary. Raises `InvalidArgumentError`
        naming `days`, `UnavailableError` when the database does not answer."""
        n = days or DEFAULT_DAYS
        if not 1 <= n <= MAX_DAYS:
            raise InvalidArgumentError(FieldViolation("days", f"must be between 1 and {MAX_DAYS}, not {days}"))
        await self._counter.flush(workspace.key)
        end = self._today()
        async with self._db.tenant(workspace.key) as conn:
            return await daily_counts(conn, workspace.key, end - timedelta(days=n - 1), end)
