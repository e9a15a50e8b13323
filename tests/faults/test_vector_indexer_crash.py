"""`memplane serve` killed (SIGKILL) in the middle of a vector indexing pass, then two
servers started on the same database, both indexing the backlog it left (FOR UPDATE
SKIP LOCKED): every memory ends in its workspace's HNSW graph once, none lost or doubled,
the counts exact (rows, ADD events, the workspace's counters, ListMemories, usage) and a
search walking the graph finds what was written.

"In the middle" is made certain, not hoped for: the backlog is in two workspaces, and the
test holds the second one's partition (LOCK TABLE ... IN SHARE MODE, which the indexer's
UPDATE waits for) while the server's start scan indexes the first (the pass takes the
workspaces in key order), so the server is killed with one workspace done and its
transaction in the other open."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import psycopg
from psycopg import sql

from memplane.client import AsyncMemplaneClient
from memplane.server.storage.vector_index import INDEX_MARKER
from memplane.v1 import retrieval_pb2
from tests.e2e.test_vector_index import TOPICS, _flags
from tests.faults.conftest import ServerProcess, wait_for_sql
from tests.fix_server import random_workspace_name
from tests.support import mem, unit_vectors

CALLS = 20  # small writes per workspace, each left outside the graph
PER_CALL = 12  # <= vector_index.max_deferred
ROWS = CALLS * PER_CALL + len(TOPICS)
# The indexer's backend waiting for a lock in its UPDATE (named by its comment), not the holder's.
# The indexer's backend waiting for the lock the test holds on this partition: filtered by
# the lock, since the session's database serves every test's servers.
HELD = (
    "SELECT (SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted"
    " WHERE l.relation = %s::regclass AND a.pid <> %s AND strpos(a.query, %s) > 0 LIMIT 1)"
)


async def _workspace(server: ServerProcess, admin_key: str, pg_dsn: str) -> tuple[str, str, int]:
    name = random_workspace_name()
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace(name)
        key = (await admin.create_api_key(name, "crash")).api_key
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        row = await (await conn.execute("SELECT key FROM workspaces WHERE name = %s", (name,))).fetchone()
    assert row is not None
    return name, key, int(row[0])


async def _write_backlog(server: ServerProcess, api_key: str, seed: int) -> None:
    vectors = unit_vectors(CALLS * PER_CALL, seed=seed)
    async with AsyncMemplaneClient(server.target, api_key, timeout=120) as client:
        for call in range(CALLS):
            rows = range(call * PER_CALL, (call + 1) * PER_CALL)
            await client.add_memories([mem(f"ship's log {seed}-{i}", embedding=vectors[i]) for i in rows])
        for text in TOPICS:
            await client.add_memories([mem(text)])


async def _counts(pg_dsn: str, workspace_key: int) -> tuple[int, ...]:
    """(rows, distinct ids, ADD events, the counters' memory_count)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM memories WHERE workspace_key = %(k)s),"
            " (SELECT count(DISTINCT id) FROM memories WHERE workspace_key = %(k)s),"
            " (SELECT count(*) FROM memory_events WHERE workspace_key = %(k)s AND kind = 'ADD'),"
            " (SELECT memory_count FROM workspace_stats WHERE workspace_key = %(k)s)",
            {"k": workspace_key},
        )
        row = await cur.fetchone()
    assert row is not None
    return tuple(int(v) for v in row)


async def test_a_server_killed_mid_pass_leaves_its_backlog_to_two_others_who_index_it_once(
    pg_dsn: str, serve: Callable[..., Awaitable[ServerProcess]], admin_key: str
) -> None:
    writer = await serve(pg_dsn, MEMPLANE_VECTOR_INDEX__INTERVAL_SECONDS="60")  # no pass while the test writes
    first_name, first_key, first = await _workspace(writer, admin_key, pg_dsn)
    second_name, second_key, second = await _workspace(writer, admin_key, pg_dsn)
    assert first < second  # a pass takes them in this order
    await _write_backlog(writer, first_key, seed=1)
    await _write_backlog(writer, second_key, seed=2)
    writer.process.kill()
    await writer.process.wait()
    assert await _flags(pg_dsn, first) == [False] * ROWS
    assert await _flags(pg_dsn, second) == [False] * ROWS

    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
        partition = sql.Identifier(f"memories_w{second}")
        await holder.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(partition))
        pid = (await (await holder.execute("SELECT pg_backend_pid()")).fetchone() or (0,))[0]
        # Its scans take both workspaces; a pass meets the held lock for its 1 s lock timeout,
        # fails and is retried at the next scan (each second here, not every 30 s).
        killed = await serve(
            pg_dsn, MEMPLANE_VECTOR_INDEX__BATCH_SIZE="16", MEMPLANE_VECTOR_INDEX__SCAN_INTERVAL_SECONDS="1"
        )
        held = (f"memories_w{second}", pid, INDEX_MARKER)
        orphan = await wait_for_sql(pg_dsn, HELD, held, "the indexer waits at the second workspace")
        killed.process.kill()
        await killed.process.wait()
        await holder.rollback()
    gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)"
    await wait_for_sql(pg_dsn, gone, (orphan,), "the killed server's backend has exited")
    assert await _flags(pg_dsn, first) == [True] * ROWS  # committed before the kill
    assert await _flags(pg_dsn, second) == [False] * ROWS  # the batch in flight rolled back

    env = {"MEMPLANE_VECTOR_INDEX__BATCH_SIZE": "1", "MEMPLANE_RETRIEVAL__EXACT_SCAN_MAX_ROWS": "0"}
    servers = await asyncio.gather(serve(pg_dsn, **env), serve(pg_dsn, **env))  # both scan at start
    done = "SELECT bool_and(vector_indexed) FROM memories WHERE workspace_key = %s"
    await wait_for_sql(pg_dsn, done, (second,), "the two servers have put the backlog into the graph")

    for name, api_key, workspace_key in ((first_name, first_key, first), (second_name, second_key, second)):
        assert await _counts(pg_dsn, workspace_key) == (ROWS, ROWS, ROWS, ROWS)
        for server in servers:
            async with AsyncMemplaneClient(server.target, api_key) as client:
                assert (await client.list_memories(page_size=1)).total_size == ROWS
                for text in TOPICS:
                    hits = (await client.search(text, top_k=3, mode=retrieval_pb2.SEARCH_MODE_VECTOR)).hits
                    assert hits[0].memory.content == text  # the graph walk finds it
                    assert len({h.memory.id for h in hits}) == len(hits)
            async with AsyncMemplaneClient(server.target, admin_key) as admin:
                assert (await admin.get_workspace_usage(name)).memory_count == ROWS
