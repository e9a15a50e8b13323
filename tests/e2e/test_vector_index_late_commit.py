"""A small write whose statement commits after the vector indexer's pass has looked at its
workspace (here: the insert waits at the workspace's counter rows, which the test holds,
while the pass runs) must still reach the HNSW graph moments later (decision 0006: "a
workspace's rows are outside the graph for about interval_seconds plus a pass").

The indexer is told of a write when its insert is sent (`VectorIndexer.mark`), before it
commits; the pass that takes the mark finds nothing committed, and without a second look
no later pass would come until another write to the workspace or the scan every `scan_interval_seconds` (30 s
by default; a day in the test servers) — on the code before the indexer's follow-ups
(`VectorIndexer._follow_up`) this test timed out. Searches find the memory meanwhile (the
exact scan of the backlog): what was lost is the bound on how long it stays outside the graph."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import psycopg
import pytest

from memplane.server.app import VECTOR_INDEXER, App
from memplane.server.storage.vector_index import VectorIndexer
from memplane.v1 import retrieval_pb2
from tests.e2e.test_vector_index import _flags, _key
from tests.fix_server import TestWorkspace
from tests.support import mem

DEADLINE_SECONDS = 10.0  # far beyond interval_seconds (0.2) plus a pass of one row
# The server's insert, its row written, waiting for the counter rows the test holds.
_AT_THE_COUNTER = (
    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s"
    " AND query LIKE '%%memplane_insert_memories(%%')"
)


async def _until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    """Poll *check* until it returns true; fail naming *what*."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)  # between looks


async def test_a_small_write_committed_after_the_pass_looked_still_enters_the_graph(
    app: App, workspace: TestWorkspace, pg_dsn: str
) -> None:
    key = await _key(pg_dsn, workspace)
    indexer = app.jobs[VECTOR_INDEXER]
    assert isinstance(indexer, VectorIndexer)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
        await holder.execute("SELECT 1 FROM workspace_counters WHERE workspace_key = %s FOR UPDATE", (key,))
        pid = (await (await holder.execute("SELECT pg_backend_pid()")).fetchone() or (0,))[0]
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as watcher:

            async def waiting() -> bool:
                row = await (await watcher.execute(_AT_THE_COUNTER, (pid,))).fetchone()
                return bool(row and row[0])

            passes = indexer.stats.passes
            write = asyncio.ensure_future(workspace.client.add_memories([mem("the ferry leaves at dawn")]))
            await _until("the insert waits at the counter rows", waiting)

            async def passed() -> bool:
                return indexer.stats.passes > passes

            await _until("the indexer's pass for the write has run", passed)
        await holder.rollback()  # the insert commits now
    [stored] = await write
    hits = (await workspace.client.search("ferry at dawn", mode=retrieval_pb2.SEARCH_MODE_VECTOR)).hits
    assert [h.memory.id for h in hits] == [stored.id]  # found meanwhile, by the backlog's exact scan

    async def indexed() -> bool:
        return await _flags(pg_dsn, key) == [True]

    await _until("the memory is in the graph", indexed)
