"""A small write whose statement commits late (here: the insert waits at the workspace's
counter rows, which the test holds) still reaches the HNSW graph moments after it commits
(decision 0006: "a workspace's rows are outside the graph for about interval_seconds plus
a pass").

The indexer is told of a deferred write once it has committed (`after_commit`,
memplane.server.storage.commits). Told when the insert was sent, as at first, its pass
looked while the row was not there yet and no later pass came until another write to the
workspace or the scan every `scan_interval_seconds` (a day in the test servers): this test
timed out. Searches find the memory meanwhile (the exact scan of the backlog)."""

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

            write = asyncio.ensure_future(workspace.client.add_memories([mem("the ferry leaves at dawn")]))
            await _until("the insert waits at the counter rows", waiting)
        await holder.rollback()  # the insert commits now
    [stored] = await write
    hits = (await workspace.client.search("ferry at dawn", mode=retrieval_pb2.SEARCH_MODE_VECTOR)).hits
    assert [h.memory.id for h in hits] == [stored.id]  # found meanwhile, by the backlog's exact scan

    async def indexed() -> bool:
        return await _flags(pg_dsn, key) == [True]

    await _until("the memory is in the graph", indexed)
