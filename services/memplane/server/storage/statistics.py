"""Planner statistics after a burst of writes: ANALYZE a workspace's `memories` partition
as soon as its writes pause, instead of at autovacuum's next round.

Why: a search's statement is planned from the partition's statistics. A workspace that
has just received its memories one add at a time has none yet (or those of a much smaller
table), and PostgreSQL plans the statement blind until autovacuum's next round looks at
the partition — up to `autovacuum_naptime` (one minute by default) after it crossed
autovacuum's analyze threshold. Measured on LoCoMo's ten conversations written one memory
per AddMemories call and searched at 8 clients ~15 s after, in alternating runs with this
job off and on: 8.2-8.8 ms of PostgreSQL CPU per search without it, 6.9-7.3 ms with it; a
VACUUM without ANALYZE gained nothing beyond the noise (`docs/benchmarks/peers.md`).

What: every committed insert of memories is counted per workspace (`wrote`, called after
the commit: `memplane.server.storage.commits`). A workspace is *due* once the rows written
since its last ANALYZE here reach `threshold + scale_factor * rows` (rows: the partition's
`reltuples` after that ANALYZE, 0 before one) — autovacuum's own rule, with PostgreSQL's
defaults for `autovacuum_analyze_threshold` (50) and `autovacuum_analyze_scale_factor`
(0.1) — and it is analyzed when no write of it has come for *quiet_seconds*, or at once
when the rows written reach `threshold + rows` (a long steady import gets statistics as
its table doubles, not only at its end). The ANALYZE is of the one partition, on the
workspace's cluster, as the connection's own role (the tables' owner), with a short
lock timeout (LOCK_TIMEOUT_MS): a partition another session locks (a workspace being
deleted, a concurrent ANALYZE) is not waited for. It resets the partition's
`n_mod_since_analyze`, so autovacuum does not analyze it again for the same writes.

A failed ANALYZE (a lock not granted, the statement cancelled or past its timeout, the
database down) keeps the workspace's count for the next try, after a doubling wait; a
workspace deleted meanwhile is forgotten. Each writing process counts its own writes,
once they are stored (duplicates and replayed requests store none).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from memplane.errors import DeadlineExceededError, UnavailableError, WorkspaceDeletedError
from memplane.server.background import cancel
from memplane.server.storage.routing import TenantDatabase
from memplane.server.storage.workspaces import partition_name

_log = logging.getLogger(__name__)

# PostgreSQL's defaults for autovacuum_analyze_threshold and autovacuum_analyze_scale_factor.
DEFAULT_THRESHOLD = 50
DEFAULT_SCALE_FACTOR = 0.1

RETRY_MAX_SECONDS = 30.0  # the longest wait between rounds while ANALYZEs keep failing (doubling from quiet_seconds)

# An ANALYZE does not queue behind another session's lock (a workspace being deleted, a
# concurrent ANALYZE): past this it fails (SQLSTATE 55P03) and is tried again later.
LOCK_TIMEOUT_MS = 100
_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"

# The partition's row estimate after its ANALYZE (no row: the partition is gone).
_RELTUPLES = "SELECT greatest(reltuples, 0)::float8 AS rows FROM pg_class WHERE oid = to_regclass(%s)"


@dataclass
class _Written:
    rows: int = 0  # inserted since the workspace's last ANALYZE here
    last: float = 0.0  # monotonic time of the latest write counted


@dataclass
class AnalyzeStats:
    """Partitions analyzed, and ANALYZEs that failed (counted for the next try)."""

    analyzed: int = 0
    failures: int = 0


class PartitionAnalyzer:
    """The background job (`memplane.server.background.Job`) that keeps each written
    workspace's planner statistics current (see the module docstring). `wrote(key, rows)`
    after a commit; `start()` needs a running event loop; `start()` and `await stop()` are
    idempotent. *lock_timeout_ms*: how long its ANALYZE may wait for a lock before it
    fails (and is tried again later). *clock* is the monotonic clock in seconds (tests give
    their own). Raises `ValueError` for a setting out of range."""

    def __init__(
        self,
        db: TenantDatabase,
        *,
        quiet_seconds: float = 1.0,
        threshold: int = DEFAULT_THRESHOLD,
        scale_factor: float = DEFAULT_SCALE_FACTOR,
        lock_timeout_ms: int = LOCK_TIMEOUT_MS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if quiet_seconds <= 0 or threshold < 0 or scale_factor < 0 or lock_timeout_ms < 1:
            raise ValueError("quiet_seconds must be > 0, threshold and scale_factor >= 0, lock_timeout_ms >= 1")
        self._db = db
        self._quiet = quiet_seconds
        self._threshold = threshold
        self._scale = scale_factor
        self._clock = clock
        self._lock_timeout = f"{lock_timeout_ms}ms"
        self._written: dict[int, _Written] = {}
        self._rows: dict[int, float] = {}  # reltuples after the workspace's last ANALYZE here
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.stats = AnalyzeStats()

    def wrote(self, workspace_key: int, rows: int) -> None:
        """Count *rows* memories committed into the workspace just now."""
        written = self._written.setdefault(workspace_key, _Written())
        written.rows += rows
        written.last = self._clock()
        if self._ready_in(workspace_key, written.last) is not None:
            self._wake.set()

    def _ready_in(self, key: int, now: float) -> float | None:
        """Seconds until workspace *key* should be analyzed (0: now); None while not due."""
        written = self._written.get(key)
        if written is None:
            return None
        rows = self._rows.get(key, 0.0)
        if written.rows < self._threshold + self._scale * rows:
            return None
        if written.rows >= self._threshold + rows:  # the table doubled: do not wait for a pause
            return 0.0
        return max(0.0, written.last + self._quiet - now)

    def due(self, now: float | None = None) -> list[int]:
        """The workspaces to analyze at *now* (default: the clock's now), by key."""
        at = self._clock() if now is None else now
        return sorted(k for k in self._written if self._ready_in(k, at) == 0.0)

    async def analyze_due(self, now: float | None = None) -> list[int]:
        """ANALYZE every workspace `due` at *now*; the keys analyzed. A workspace whose
        ANALYZE failed keeps its count (`stats.failures`; the error logged at DEBUG); a
        deleted one is forgotten."""
        done: list[int] = []
        for key in self.due(now):
            counted = self._written[key].rows
            try:
                rows = await self._analyze(key)
            except (WorkspaceDeletedError, psycopg.errors.UndefinedTable):
                self._forget(key)
                continue
            except (UnavailableError, DeadlineExceededError, psycopg.Error) as error:
                self.stats.failures += 1
                _log.debug("ANALYZE of workspace %d failed (%s); kept for the next try", key, error)
                continue
            self._rows[key] = rows
            self._written[key].rows -= counted  # writes counted while it ran stay counted
            if self._written[key].rows <= 0:
                del self._written[key]
            self.stats.analyzed += 1
            done.append(key)
        return done

    async def _analyze(self, key: int) -> float:
        """ANALYZE the workspace's memories partition; its reltuples after."""
        table = partition_name("memories", key)
        async with self._db.autocommit(key) as conn, conn.transaction():
            await conn.execute(_LOCK_TIMEOUT, (self._lock_timeout,))
            await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
            cur = await conn.execute(_RELTUPLES, (table,))
            row = await cur.fetchone()
        if row is None:
            raise psycopg.errors.UndefinedTable(f"{table} is gone")
        return float(row["rows"])

    def _forget(self, key: int) -> None:
        self._written.pop(key, None)
        self._rows.pop(key, None)

    @property
    def running(self) -> bool:
        """Whether the background task is alive."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the background task (no-op when running)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="memplane-partition-analyzer")

    async def stop(self) -> None:
        """Cancel the background task and wait for it to end."""
        task, self._task = self._task, None
        await cancel(task)

    async def _run(self) -> None:
        failed = 0  # rounds in a row with a failure
        while True:
            now = self._clock()
            waits = [w for k in self._written if (w := self._ready_in(k, now)) is not None]
            self._wake.clear()
            if not waits or min(waits) > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(waits) if waits else None):
                        await self._wake.wait()
                continue
            failures = self.stats.failures
            try:
                await self.analyze_due()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug: logged, and the job goes on
                self.stats.failures += 1
                _log.exception("analyzing written workspaces failed")
            if self.stats.failures == failures:
                failed = 0
                continue
            failed += 1  # the failed workspaces are still due: wait before the next round
            await asyncio.sleep(min(self._quiet * 2 ** min(failed - 1, 16), RETRY_MAX_SECONDS))
