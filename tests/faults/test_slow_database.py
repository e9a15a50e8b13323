"""A hung database: another session holds `LOCK TABLE memories IN ACCESS EXCLUSIVE MODE`
in an open transaction, so every read and write of memories waits on the lock. Each RPC
must end with DEADLINE_EXCEEDED at its deadline, its statement must be cancelled in
PostgreSQL (no backend of the server still waiting on the lock once the RPCs have ended),
and the pool must not be left exhausted: once the lock is released, more requests than
the pool holds connections all succeed. A client that gives up (a cancelled RPC, no
deadline) cancels its statement too.

The server's own statement timeout is set far beyond every deadline here (120 s), so
only the request's deadline can end the wait in time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import DeadlineExceededError
from memplane.server.storage.retention import SWEEP_MARKER
from memplane.v1 import retrieval_pb2
from tests.faults.conftest import KillablePostgres, ServerProcess
from tests.support import mem

POOL_SIZE = 4  # the server's pool_max_size: every test sends more requests than this
DEADLINE = 2.0  # seconds: each RPC's deadline while the lock is held
STATEMENT_TIMEOUT = "120"  # the server's statement_timeout (s), far past every deadline and wait here
CANCEL_WAIT = 20.0  # seconds the test waits for the server's backends to stop waiting on the lock
RECOVERED_DEADLINE = 60.0
LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL

# The server's request statements waiting on a lock. Not the retention sweep: its first pass
# runs 1 s after start and, when it meets the lock, waits until the test releases it (this
# made the cancellation test fail at random, under load).
WAITING_ON_LOCKS = """
SELECT count(*) FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND wait_event_type = 'Lock'
  AND query NOT LIKE %s
"""


WAITING_QUERIES = WAITING_ON_LOCKS.replace(
    "SELECT count(*)", "SELECT left(query, 200) || ' [' || state || ', waited ' || (now() - state_change)::text || ']'"
)


@asynccontextmanager
async def memories_locked(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[tuple[int, ...]]]:
    """An open transaction (as the superuser) holding ACCESS EXCLUSIVE on memories and its
    partitions until the block ends."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        yield conn
        await conn.rollback()


async def waiting_on_locks(conn: psycopg.AsyncConnection[tuple[int, ...]]) -> int:
    cur = await conn.execute(WAITING_ON_LOCKS, (f"%{SWEEP_MARKER}%",))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def until_none_waiting(dsn: str) -> None:
    """Poll pg_stat_activity (from a connection of its own) until no client backend waits on
    a lock; fail after CANCEL_WAIT seconds with how many still do."""
    deadline = time.monotonic() + CANCEL_WAIT
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while (waiting := await waiting_on_locks(conn)) > 0:
            if time.monotonic() > deadline:
                cur = await conn.execute(WAITING_QUERIES, (f"%{SWEEP_MARKER}%",))
                queries = [row[0] for row in await cur.fetchall()]  # which statement, for the next reader
                pytest.fail(
                    f"{waiting} statements of the server still wait on the lock {CANCEL_WAIT} s after their RPCs"
                    f" ended: {queries}"
                )
            await asyncio.sleep(0.1)  # a poll interval, not a synchronisation: the condition is re-read


async def until_waiting(dsn: str, count: int) -> None:
    """Poll until at least *count* client backends wait on a lock (the RPCs reached the database)."""
    deadline = time.monotonic() + CANCEL_WAIT
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while await waiting_on_locks(conn) < count:
            assert time.monotonic() < deadline, f"fewer than {count} statements ever waited on the lock"
            await asyncio.sleep(0.05)


async def _workspace(server: ServerProcess, admin_key: str, name: str) -> str:
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace(name)
        return (await admin.create_api_key(name, "test")).api_key


async def _serve(serve: object, dsn: str) -> ServerProcess:
    return await serve(  # type: ignore[operator,no-any-return]
        dsn,
        MEMPLANE_DATABASE__POOL_MIN_SIZE="1",
        MEMPLANE_DATABASE__POOL_MAX_SIZE=str(POOL_SIZE),
        MEMPLANE_DATABASE__STATEMENT_TIMEOUT=STATEMENT_TIMEOUT,
        # one workspace sends more calls at once than the pool holds: no per-workspace cap here
        MEMPLANE_QUOTA__MAX_CONCURRENT_REQUESTS_PER_WORKSPACE="0",
    )


async def test_statements_past_the_deadline_are_cancelled_and_the_pool_recovers(
    killable_postgres: KillablePostgres, serve: object, admin_key: str
) -> None:
    server = await _serve(serve, killable_postgres.dsn)
    key = await _workspace(server, admin_key, "hung")
    async with AsyncMemplaneClient(server.target, key, timeout=RECOVERED_DEADLINE) as client:
        await client.add_memories([mem(f"the night train to Porto, car {i}") for i in range(3)])
        assert len((await client.search("night train", mode=LEXICAL)).hits) == 3
    hurried = AsyncMemplaneClient(server.target, key, timeout=DEADLINE)
    try:
        async with memories_locked(killable_postgres.dsn):
            searches = [hurried.search(f"night train {i}", mode=LEXICAL) for i in range(2 * POOL_SIZE)]
            writes = [hurried.add_memories([mem(f"written under the lock {i}")]) for i in range(POOL_SIZE)]
            results = await asyncio.gather(*searches, *writes, return_exceptions=True)
            assert all(isinstance(r, DeadlineExceededError) for r in results), results
            await until_none_waiting(killable_postgres.dsn)  # while the lock is still held
    finally:
        await hurried.close()

    async with AsyncMemplaneClient(server.target, key, timeout=RECOVERED_DEADLINE) as client:
        replies = await asyncio.gather(
            *(client.search("night train", mode=LEXICAL, top_k=20) for _ in range(3 * POOL_SIZE))
        )
        assert [len(r.hits) for r in replies] == [3] * 3 * POOL_SIZE
        await asyncio.gather(
            *(client.add_memories([mem(f"the night train to Porto, late car {i}")]) for i in range(3 * POOL_SIZE))
        )
        stored = (await client.search("night train Porto", mode=LEXICAL, top_k=50)).hits
        assert len(stored) == 3 + 3 * POOL_SIZE  # nothing written under the lock was stored
    log = server.log.read_text(errors="replace")
    assert "unhandled error" not in log, log[-3000:]


async def test_a_client_that_gives_up_cancels_its_statement(
    killable_postgres: KillablePostgres, serve: object, admin_key: str
) -> None:
    server = await _serve(serve, killable_postgres.dsn)
    key = await _workspace(server, admin_key, "gone")
    other_key = await _workspace(server, admin_key, "other")
    patient = AsyncMemplaneClient(server.target, key, timeout=600.0)  # no deadline that matters
    other = AsyncMemplaneClient(server.target, other_key, timeout=600.0)
    try:
        await patient.add_memories([mem("the ferry to Tangier leaves at noon")])
        async with memories_locked(killable_postgres.dsn):
            calls = [asyncio.ensure_future(patient.search(f"ferry {i}", mode=LEXICAL)) for i in range(2 * POOL_SIZE)]
            # One workspace holds all the pool's connections but one (memplane.server.quota.fair);
            # another workspace's call takes the last.
            calls.append(asyncio.ensure_future(other.search("ferry", mode=LEXICAL)))
            await until_waiting(killable_postgres.dsn, POOL_SIZE)  # the pool's connections all wait
            for call in calls:
                call.cancel()  # the client gives up: gRPC cancels the RPC
            await asyncio.gather(*calls, return_exceptions=True)
            await until_none_waiting(killable_postgres.dsn)
        reply = await patient.search("ferry Tangier", mode=LEXICAL)
        assert [h.memory.content for h in reply.hits] == ["the ferry to Tangier leaves at noon"]
    finally:
        await patient.close()
        await other.close()
