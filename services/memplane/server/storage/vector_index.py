"""The vector indexer: a background job that puts just-written memories into their
workspace's HNSW graph, off the write path (migration 0020).

A memory is stored with `vector_indexed = false`, and each workspace's HNSW index is
partial (WHERE vector_indexed), so an add costs no graph insert: pgvector's insert walks
the graph (ef_construction candidates per layer), about half of PostgreSQL's time for a
one-memory add, and more as the graph grows (bench/ingest_growth.py). Moments later this
job sets the flag on the workspace's backlog, BATCH_SIZE rows per transaction: the
UPDATE enters them into the graph. Until then a search finds them by an exact scan of the
backlog beside the graph walk (`memplane.server.storage.search`), so nothing committed is
ever missing from a search, and a process killed mid-batch loses nothing (the batch's
transaction rolls back; the rows stay in the backlog for the next pass, here or in another
process: the batch skips rows another indexer holds, FOR UPDATE SKIP LOCKED).

Which writes wait: a call of at most *max_deferred* memories, while the workspace's
backlog (counted by this process since its last pass) is under *max_backlog*. A larger
batch, or any write while the indexer is behind, enters the graph in its own statement,
as before migration 0020: a bulk load's graph inserts cost the same inline, and indexing
its rows afterwards would rewrite each of them (the flag's UPDATE is a new row version
and an entry in every index of the partition: little CPU beside its graph insert, but
about as much WAL again as the insert, and a dead row version for vacuum, per memory:
bench/ingest_parts.py); and a backlog the indexer cannot catch up with would make every
search scan it exactly.

Which workspaces to visit: those this process deferred a write of (`mark`, called once
the write has committed: `memplane.server.storage.commits`, so a pass finds its rows),
after a short gather (*interval_seconds*, so one pass takes many rows), and every
*scan_interval_seconds* every workspace with a backlog (rows left by a process that
stopped before its pass, or written by another process that stopped), on every database
cluster; one scan at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from memplane.errors import UnavailableError, WorkspaceDeletedError
from memplane.server.background import cancel
from memplane.server.storage.database import Database
from memplane.server.storage.routing import TenantDatabase

_log = logging.getLogger(__name__)

BACKGROUND_LOCK_TIMEOUT_MS = 1_000  # a pass meeting a held lock fails and is retried, not left waiting
BATCH_SIZE = 256  # rows per transaction: short row locks, bounded WAL per commit
INDEX_MARKER = "memplane: vector indexing"  # names the statement in pg_stat_activity
RETRY_MAX_SECONDS = 30.0  # the longest wait between passes while they keep failing (the wait doubles from interval)

INDEX_BATCH = """/* memplane: vector indexing */
UPDATE memories m SET vector_indexed = true
FROM (SELECT id FROM memories WHERE workspace_key = %(ws)s AND NOT vector_indexed
      ORDER BY created_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED) due
WHERE m.workspace_key = %(ws)s AND m.id = due.id"""

# Every workspace with a backlog: one statement over the partial backlog indexes of all
# partitions (small: a row leaves its index when indexed). Per database, as the extraction
# worker's wake-up query: tests/e2e/test_workspace_scoping.py lists it with its reason.
BACKLOG_WORKSPACES = "SELECT DISTINCT workspace_key FROM memories WHERE NOT vector_indexed"


@dataclass
class IndexerStats:
    """Rows indexed, passes completed and failed since start."""

    indexed: int = 0
    passes: int = 0
    failures: int = 0


async def index_backlog(db: TenantDatabase, workspace_key: int, *, batch_size: int = BATCH_SIZE) -> int:
    """Put the workspace's not-yet-indexed memories into its HNSW graph, *batch_size* per
    tenant transaction, until a batch finds fewer; return how many. Rows another
    transaction holds are skipped (left for the next pass). Raises `ValueError` for a
    batch size < 1, `WorkspaceDeletedError` for a deleted workspace; database errors
    propagate."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    total = 0
    while True:
        async with db.tenant(workspace_key, lock_timeout_ms=BACKGROUND_LOCK_TIMEOUT_MS) as conn:
            cur = await conn.execute(INDEX_BATCH, {"ws": workspace_key, "batch": batch_size})
            count = cur.rowcount
        total += count
        if count < batch_size:
            return total


async def backlog_workspaces(db: Database) -> list[int]:
    """The keys of every workspace with memories not yet in its graph."""
    async with db.admin() as conn:
        cur = await conn.execute(BACKLOG_WORKSPACES)
        rows = await cur.fetchall()
    return sorted(int(r["workspace_key"]) for r in rows)


class VectorIndexer:
    """The background job (`memplane.server.background.Job`): `defers(key, count)` before
    a write, `mark(key, count)` once a deferred one has committed; the workspaces marked are
    indexed *interval_seconds* later (the gather), all with a backlog every
    *scan_interval_seconds* and at start. A
    failing pass is counted and its workspaces kept for the next, with their rows still
    counted toward *max_backlog*; passes failing in a row are retried after a doubling
    wait (up to RETRY_MAX_SECONDS), the first logged at ERROR, the others at DEBUG, and
    the recovery at INFO (a database outage is one error in the log, not one per retry).
    `start()` needs a running event loop; `start()` and `await stop()` are idempotent.
    *db* opens each workspace's tenant transactions (a `RoutedDatabase`: on its cluster);
    *clusters* are the primaries a scan reads backlogs from (default: *db* itself, one
    `Database`)."""

    def __init__(
        self,
        db: TenantDatabase,
        *,
        clusters: Sequence[Database] | None = None,
        interval_seconds: float = 0.2,
        scan_interval_seconds: float = 30.0,
        batch_size: int = BATCH_SIZE,
        max_deferred: int = 16,
        max_backlog: int = 2_000,
    ) -> None:
        if interval_seconds <= 0 or scan_interval_seconds <= 0:
            raise ValueError("interval_seconds and scan_interval_seconds must be > 0")
        if batch_size < 1 or max_deferred < 0 or max_backlog < 0:
            raise ValueError("batch_size must be >= 1, max_deferred and max_backlog >= 0")
        self._db = db  # a workspace's backlog is indexed in its tenant transactions here
        self._clusters = list(clusters) if clusters is not None else [cast(Database, db)]  # scanned for backlogs
        self._interval = interval_seconds
        self._scan_interval = scan_interval_seconds
        self._batch = batch_size
        self._max_deferred = max_deferred
        self._max_backlog = max_backlog
        self._marked: dict[int, int] = {}  # workspace key -> rows deferred since its last pass began
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.stats = IndexerStats()

    def defers(self, workspace_key: int, count: int) -> bool:
        """Whether a write of *count* memories leaves them to the indexer (the module
        docstring says when); False: they enter the graph in the write's own statement."""
        return count <= self._max_deferred and self._marked.get(workspace_key, 0) < self._max_backlog

    def mark(self, workspace_key: int, count: int) -> None:
        """Note *count* rows written outside the workspace's graph: indexed at the next pass."""
        self._marked[workspace_key] = self._marked.get(workspace_key, 0) + count
        self._wake.set()

    @property
    def running(self) -> bool:
        """Whether the background task is alive."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the background task (no-op when running)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="memplane-vector-indexer")

    async def stop(self) -> None:
        """Cancel the background task and wait for it to end (a batch in flight rolls back)."""
        task, self._task = self._task, None
        await cancel(task)

    async def run_once(self, workspace_keys: set[int] | None = None) -> int:
        """One pass now over *workspace_keys* (None: every workspace with a backlog, on
        every cluster); the rows indexed. A deleted workspace is skipped. A workspace (or a
        scan) whose cluster is down does not hold up the others: they are indexed, then
        the pass raises that `UnavailableError` (the background pass keeps every workspace
        of it for the next, after its backoff); other errors propagate."""
        return sum((await self._pass(workspace_keys)).values())

    async def _pass(self, workspace_keys: set[int] | None) -> dict[int, int]:
        """`run_once`, with the rows indexed per workspace."""
        keys = set(workspace_keys or ())
        unreachable: UnavailableError | None = None
        if workspace_keys is None:
            for db in self._clusters:
                try:
                    keys.update(await backlog_workspaces(db))
                except UnavailableError as error:
                    unreachable = unreachable or error
        indexed: dict[int, int] = {}
        for key in sorted(keys):
            try:
                indexed[key] = await index_backlog(self._db, key, batch_size=self._batch)
            except WorkspaceDeletedError:
                continue
            except UnavailableError as error:  # its cluster is down: the others first, then the pass fails
                unreachable = unreachable or error
        if unreachable is not None:
            raise unreachable
        return indexed

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_scan = loop.time()  # a scan at start: rows a stopped process left
        failed = 0  # passes failed in a row
        while True:
            if loop.time() < next_scan:
                if not self._marked:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(next_scan - loop.time()):
                            await self._wake.wait()
                if self._marked:
                    await asyncio.sleep(self._interval)  # gather: the writes of the next moments join this pass
            scan = loop.time() >= next_scan
            marked, self._marked = self._marked, {}
            try:
                counts = await self._pass(None if scan else set(marked))
                self.stats.indexed += sum(counts.values())
                self.stats.passes += 1
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any failure: log it, keep the workspaces, retry after a backoff
                self.stats.failures += 1
                failed += 1
                self._keep(marked)
                delay = min(self._interval * 2 ** min(failed - 1, 16), RETRY_MAX_SECONDS)
                if failed == 1:  # the first failure is news; each retry while it lasts is not
                    _log.exception("vector indexing pass failed; retrying in %.1f s", delay)
                else:
                    _log.debug(
                        "vector indexing pass failed %d times in a row (%s); retrying in %.1f s", failed, error, delay
                    )
                await asyncio.sleep(delay)
            else:
                if failed:
                    _log.info("vector indexing passes succeed again after %d failed", failed)
                failed = 0
            if scan:
                next_scan = loop.time() + self._scan_interval

    def _keep(self, marked: dict[int, int]) -> None:
        """Put back the counts of a failed pass's workspaces: their rows still wait, and
        still count toward max_backlog (the cap holds while the indexer cannot run)."""
        for key, count in marked.items():
            self._marked[key] = self._marked.get(key, 0) + count
