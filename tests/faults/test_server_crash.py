"""`memplane serve` killed (SIGKILL) in the middle of a write, then started again and the
write retried with the same request id: exactly the retried set is stored, once — no
half-written batch, no duplicate; memories, history events, the workspace's counters
and the idempotency record agree. (Whether the killed write itself was stored depends on
whether it had reached the server whole: an AddMemories is one autocommitted statement.)

"In the middle" is made certain, not hoped for: the test holds the workspace's
`workspace_counters` rows (FOR UPDATE, every shard) from its own connection, so the server's transaction
has inserted every row and waits at its counter update; the test waits until that
backend is seen waiting for the lock, kills the server, lets go of the row, and waits
until the orphaned backend has gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnavailableError
from memplane.v1 import memory_pb2, writeback_pb2
from tests.faults.conftest import ServerProcess, wait_for_sql
from tests.fix_server import random_workspace_name
from tests.support import mem, ts, unit_vectors

BATCH = 500
SETTINGS = {"MEMPLANE_LIMITS__MAX_BATCH_SIZE": str(BATCH)}


@asynccontextmanager
async def _stats_row_held(pg_dsn: str, workspace_key: int) -> AsyncIterator[int]:
    """Hold the workspace's counter row; yields the holder's pid."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        await conn.execute("SELECT 1 FROM workspace_counters WHERE workspace_key = %s FOR UPDATE", (workspace_key,))
        pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone() or (0,))[0]
        yield int(pid)
        await conn.rollback()


async def _counts(pg_dsn: str, workspace_key: int) -> tuple[int, int, int, int, int]:
    """(memories, ADD events, counter memory_count, idempotency records, transcript messages)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM memories WHERE workspace_key = %(k)s),"
            " (SELECT count(*) FROM memory_events WHERE workspace_key = %(k)s AND kind = 'ADD'),"
            " (SELECT memory_count FROM workspace_stats WHERE workspace_key = %(k)s),"
            " (SELECT count(*) FROM idempotency_keys WHERE workspace_key = %(k)s),"
            " (SELECT count(*) FROM transcript_messages WHERE workspace_key = %(k)s)",
            {"k": workspace_key},
        )
        row = await cur.fetchone()
    assert row is not None
    return tuple(int(v) for v in row)  # type: ignore[return-value]


async def _workspace(server: ServerProcess, admin_key: str, pg_dsn: str) -> tuple[str, int]:
    name = random_workspace_name()
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace(name)
        key = (await admin.create_api_key(name, "crash")).api_key
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        row = await (await conn.execute("SELECT key FROM workspaces WHERE name = %s", (name,))).fetchone()
    assert row is not None
    return key, int(row[0])


# The backends waiting for a lock in the statement that updates the counters: the update
# itself, or memplane_insert_memories (migrations 0011, 0013), whose statement updates them after
# it has inserted the rows and their lexeme counts.
_AT_THE_COUNTER = (
    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s"
    " AND (query LIKE 'UPDATE workspace_counters%%' OR query LIKE '%%FROM memplane_insert_memories(%%')"
)


async def _kill_mid_write(
    pg_dsn: str, server: ServerProcess, workspace_key: int, write: Callable[[], Awaitable[Any]]
) -> None:
    """Start *write*, kill the server while its transaction waits at the counter row, and
    wait until its orphaned backend has gone; the client sees UNAVAILABLE."""
    async with _stats_row_held(pg_dsn, workspace_key) as holder:
        call = asyncio.ensure_future(write())
        waiting = "SELECT EXISTS (" + _AT_THE_COUNTER + ")"
        await wait_for_sql(pg_dsn, waiting, (holder,), "the server's transaction waits at the counter row")
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            cur = await conn.execute(_AT_THE_COUNTER, (holder,))
            [(orphan,)] = await cur.fetchall()
        server.process.kill()
        await server.process.wait()
        with pytest.raises(UnavailableError):
            await call
    gone = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)"
    await wait_for_sql(pg_dsn, gone, (orphan,), "the killed server's backend has exited")


async def test_a_500_memory_batch_killed_mid_write_is_stored_once_by_its_retry(
    pg_dsn: str, serve: Callable[..., Awaitable[ServerProcess]], admin_key: str
) -> None:
    server = await serve(pg_dsn, **SETTINGS)
    key, workspace_key = await _workspace(server, admin_key, pg_dsn)
    vectors = unit_vectors(BATCH, seed=5)
    items = [mem(f"harbour log entry {i}", embedding=vectors[i]) for i in range(BATCH)]
    client = AsyncMemplaneClient(server.target, key, timeout=120)
    try:
        await _kill_mid_write(pg_dsn, server, workspace_key, lambda: client.add_memories(items, request_id="batch-1"))
    finally:
        await client.close()
    # Nothing half-written: all or nothing. AddMemories is one autocommitted statement
    # (memplane_insert_memories), which the orphaned backend finishes and commits once the
    # row is let go (unless it noticed its client gone first); the retry then waits for it
    # on the request id and replays it.
    assert await _counts(pg_dsn, workspace_key) in ((0, 0, 0, 0, 0), (BATCH, BATCH, BATCH, 1, 0))

    again = await serve(pg_dsn, **SETTINGS)
    async with AsyncMemplaneClient(again.target, key, timeout=120) as client:
        stored = await client.add_memories(items, request_id="batch-1")
        replayed = await client.add_memories(items, request_id="batch-1")
    assert [m.content for m in stored] == [f"harbour log entry {i}" for i in range(BATCH)]
    assert [m.id for m in replayed] == [m.id for m in stored]
    assert await _counts(pg_dsn, workspace_key) == (BATCH, BATCH, BATCH, 1, 0)


async def test_write_conversation_killed_mid_write_is_stored_once_by_its_retry(
    pg_dsn: str, serve: Callable[..., Awaitable[ServerProcess]], admin_key: str
) -> None:
    server = await serve(pg_dsn, **SETTINGS)
    key, workspace_key = await _workspace(server, admin_key, pg_dsn)
    scope = memory_pb2.Scope(user_id="skipper", session_id="voyage-1")
    when = ts(datetime(2026, 5, 8, 13, 56, tzinfo=UTC))
    messages = [
        writeback_pb2.ConversationMessage(
            id=f"m{i}", role=memory_pb2.MESSAGE_ROLE_USER, name="skipper", content=f"wind force {i}", create_time=when
        )
        for i in range(40)
    ]
    client = AsyncMemplaneClient(server.target, key, timeout=120)
    try:
        await _kill_mid_write(
            pg_dsn, server, workspace_key, lambda: client.write_conversation(scope, messages, request_id="voyage-1")
        )
    finally:
        await client.close()
    assert await _counts(pg_dsn, workspace_key) == (0, 0, 0, 0, 0)

    again = await serve(pg_dsn, **SETTINGS)
    async with AsyncMemplaneClient(again.target, key, timeout=120) as client:
        first = await client.write_conversation(scope, messages, request_id="voyage-1")
        second = await client.write_conversation(scope, messages, request_id="voyage-1")
    assert first.transcript_message_count == 40
    assert [m.id for m in second.memories] == [m.id for m in first.memories]
    assert await _counts(pg_dsn, workspace_key) == (40, 40, 40, 1, 40)
