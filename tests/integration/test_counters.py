"""Writers of one workspace do not wait for each other's commits (migration 0014): the
counters are sharded by connection, the event ids come from the workspace's sequence,
and a read-your-writes token still covers every event up to its counter.

Each test holds one write open in a transaction on a connection of its own and watches
the other backend through `pg_blocking_pids` (waiting on the database's own lock state,
never on time). The two connections are picked on different counter shards (pid mod 8),
as two pool connections of a server usually are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector_async
from psycopg.rows import dict_row

from memplane.domain.models import NewMemory, Workspace
from memplane.server.app import App
from memplane.server.storage.binary_arrays import register_array_dumpers
from memplane.server.storage.inserts import PreparedMemory, insert_memories, new_memories
from tests.integration.conftest import TenantFactory
from tests.support import unit_vectors

SHARDS = 8
WAIT_SECONDS = 60.0  # a bound on a wait that should end at once, so a bug fails, never hangs


async def _connect(dsn: str, avoid: set[int], *, autocommit: bool) -> psycopg.AsyncConnection[dict[str, Any]]:
    """A connection whose counter shard (pid mod 8) is not in *avoid*."""
    while True:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit, row_factory=dict_row)
        if conn.info.backend_pid % SHARDS not in avoid:
            await register_vector_async(conn)  # as the pool sets up its connections (Database._configure)
            register_array_dumpers(conn)
            if not autocommit:
                await conn.commit()  # the type lookup's transaction
            return conn
        await conn.close()


async def _insert(conn: psycopg.AsyncConnection[dict[str, Any]], ws: Workspace, text: str, seed: int) -> str:
    """Store one memory through `memplane_insert_memories` on *conn*; its id."""
    vector = unit_vectors(1, seed=seed)[0].astype(np.float32)
    items = [PreparedMemory(NewMemory(content=text), text, vector)]
    now = datetime.now(UTC)
    memories = new_memories(ws, items, now)
    pending = await insert_memories(conn, ws, items, memories, actor="test", request_id="", now=now)
    assert await pending.claimed()
    return memories[0].id


async def _blockers(admin: psycopg.AsyncConnection[Any], pid: int, task: asyncio.Task[Any]) -> list[int]:
    """The pids *pid* waits for, as soon as it waits for any, or [] once *task* is done."""
    while not task.done():
        cur = await admin.execute("SELECT pg_blocking_pids(%s)", (pid,))
        row = await cur.fetchone()
        if row and row[0]:
            return list(row[0])
        await asyncio.sleep(0.005)  # poll the lock state again
    return []


@asynccontextmanager
async def _open_write(app: App, ws: Workspace) -> AsyncIterator[tuple[psycopg.AsyncConnection[dict[str, Any]], str]]:
    """A one-memory insert left uncommitted on a connection of its own: (conn, memory id)."""
    conn = await _connect(app.db.dsn, set(), autocommit=False)
    try:
        memory_id = await _insert(conn, ws, "held open: apple banana cherry", seed=1)
        yield conn, memory_id
    finally:
        await conn.close()


async def _event_id(app: App, ws: Workspace, memory_id: str) -> int:
    async with app.db.admin() as conn:
        cur = await conn.execute(
            "SELECT id FROM memory_events WHERE workspace_key = %s AND memory_id = %s", (ws.key, memory_id)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["id"])


async def test_a_second_writer_commits_while_the_first_is_still_open(app: App, tenant_factory: TenantFactory) -> None:
    # Until 0014 every write updated the workspace's one stats row and held it to its
    # commit: the second writer waited for the first (at 8 callers, 531 of ~1,200 wait
    # samples were on that row).
    ws = await tenant_factory()
    async with (
        _open_write(app, ws) as (held, held_id),
        await psycopg.AsyncConnection.connect(app.db.dsn, autocommit=True) as admin,
    ):
        second = await _connect(app.db.dsn, {held.info.backend_pid % SHARDS}, autocommit=True)
        try:
            task = asyncio.ensure_future(_insert(second, ws, "second writer: apple banana cherry", seed=2))
            blockers = await asyncio.wait_for(_blockers(admin, second.info.backend_pid, task), WAIT_SECONDS)
            assert blockers == [], f"the second writer waited for the open write (pids {blockers})"
            second_id = await task
        finally:
            if not task.done():
                await held.rollback()  # let the blocked writer finish before closing it
                await task
            await second.close()
        await held.commit()
    first_event, second_event = await _event_id(app, ws, held_id), await _event_id(app, ws, second_id)
    assert sorted([first_event, second_event]) == [1, 2]  # the workspace's own ids, both taken
    async with app.db.admin() as conn:
        cur = await conn.execute(
            "SELECT (SELECT memory_count FROM workspace_stats WHERE workspace_key = %(k)s) AS counted,"
            " (SELECT content_bytes FROM workspace_stats WHERE workspace_key = %(k)s) AS bytes,"
            " (SELECT count(*) FROM memories WHERE workspace_key = %(k)s) AS rows,"
            " (SELECT sum(content_bytes) FROM memories WHERE workspace_key = %(k)s) AS row_bytes,"
            " (SELECT count(DISTINCT shard) FROM workspace_counters WHERE workspace_key = %(k)s"
            "   AND memory_count <> 0) AS shards",
            {"k": ws.key},
        )
        row = await cur.fetchone()
    assert row is not None
    assert (row["counted"], row["bytes"]) == (row["rows"], row["row_bytes"]) == (2, row["row_bytes"])
    assert row["shards"] == 2  # each writer counted on its own row


async def test_a_token_waits_for_a_writer_holding_an_id_it_counts(app: App, tenant_factory: TenantFactory) -> None:
    # The counter is the sequence's last id, taken before commit; a token must still
    # cover every event up to its counter, so cutting one waits for the open write.
    ws = await tenant_factory()
    async with (
        _open_write(app, ws) as (held, held_id),
        await psycopg.AsyncConnection.connect(app.db.dsn, autocommit=True) as admin,
    ):
        task = asyncio.ensure_future(app.db.write_position(ws.key))
        waiting: list[int] = []
        while not task.done() and not waiting:  # the token's backend, once it waits for the holder
            cur = await admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND %s = ANY(pg_blocking_pids(pid))",
                ("%memplane_settled_event_counter%", held.info.backend_pid),
            )
            waiting = [r[0] for r in await cur.fetchall()]
            await asyncio.sleep(0.005)  # poll the lock state again
        assert waiting, "the token was cut while an event it counts had not committed"
        written = await (await held.execute("SELECT pg_current_wal_insert_lsn()::text AS lsn")).fetchone()
        await held.commit()
        lsn, counter = await asyncio.wait_for(task, WAIT_SECONDS)
    assert counter == await _event_id(app, ws, held_id) == 1
    assert written is not None
    async with app.db.admin() as conn:  # the position is past the held write's rows
        cur = await conn.execute("SELECT %s::pg_lsn > %s::pg_lsn AS covers", (lsn, written["lsn"]))
        row = await cur.fetchone()
    assert row is not None
    assert row["covers"]


async def test_a_token_of_a_quiet_workspace_waits_for_nobody(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    other = await tenant_factory()
    async with _open_write(app, other):  # another workspace's open write is not waited for
        _, counter = await asyncio.wait_for(app.db.write_position(ws.key), WAIT_SECONDS)
    assert counter == 0


async def test_a_writer_whose_shard_is_held_counts_on_a_free_one(app: App, tenant_factory: TenantFactory) -> None:
    # A server's pool holds up to 16 connections: pid mod 8 alone put two writers on one
    # row (108 waits on workspace_counters in 1,186 samples at 8 callers).
    ws = await tenant_factory()
    writer = await _connect(app.db.dsn, set(), autocommit=True)
    try:
        async with (
            await psycopg.AsyncConnection.connect(app.db.dsn) as holder,
            await psycopg.AsyncConnection.connect(app.db.dsn, autocommit=True) as admin,
        ):
            await holder.execute(
                "SELECT 1 FROM workspace_counters WHERE workspace_key = %s AND shard = %s FOR UPDATE",
                (ws.key, writer.info.backend_pid % SHARDS),
            )
            task = asyncio.ensure_future(_insert(writer, ws, "its own shard is held", seed=3))
            blockers = await asyncio.wait_for(_blockers(admin, writer.info.backend_pid, task), WAIT_SECONDS)
            if blockers:
                await holder.rollback()
            await task
            assert blockers == [], "the writer waited for its own shard while others were free"
            await holder.rollback()
    finally:
        await writer.close()
    async with app.db.admin() as conn:
        cur = await conn.execute("SELECT memory_count FROM workspace_stats WHERE workspace_key = %s", (ws.key,))
        row = await cur.fetchone()
    assert row is not None
    assert row["memory_count"] == 1
