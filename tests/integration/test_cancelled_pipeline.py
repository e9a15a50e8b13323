"""A tenant transaction cancelled after its statements went to the server, at an await of
the caller's own (no psycopg wait running, so psycopg sends no cancel), while a statement
waits on a lock: the task ends at once and the statement stops waiting, instead of the
block's exit waiting for the statement's result until the lock is released.

This is how `tests/faults/test_slow_database.py` failed in two of six full runs: a lexical
search, cancelled by its RPC's deadline, still waited on the lock 20 s later. Under load
the cancellation can land after psycopg has sent a pipeline's statements (its fast path
yields to the event loop once a send has completed), and a cancel request that reaches
PostgreSQL while the backend is between messages is dropped (postgres.c,
ProcessInterrupts: "If we are reading a command from the client, just ignore the cancel
request"). Here the cancellation lands at that point on purpose ("block"). On the code
before `_pipelined_transaction` the task was still waiting when the test gave up, for the
pipelined read and write alike. The "commit" cases cancel inside the COMMIT's wait for the
statement's result, where psycopg itself sends a cancel (they passed before the fix too:
they keep the guard from breaking that path).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager

import psycopg
import pytest

from memplane.server.app import App
from memplane.server.storage.database import CLIENT_CHECK_INTERVAL_MS, Connection
from tests.integration.conftest import TenantFactory

GIVE_UP_SECONDS = 10 * CLIENT_CHECK_INTERVAL_MS / 1000


async def _waiting(monitor: psycopg.AsyncConnection[tuple[object, ...]], pid: int) -> bool:
    cur = await monitor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,))
    row = await cur.fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("where", ["block", "commit"])
@pytest.mark.parametrize("kind", ["read", "write"])
async def test_a_pipelined_transaction_cancelled_after_its_statement_was_sent_leaves_nothing_waiting(
    app: App, tenant_factory: TenantFactory, pg_dsn: str, kind: str, where: str
) -> None:
    workspace = await tenant_factory()

    def block() -> AbstractAsyncContextManager[Connection]:
        if kind == "read":
            return app.db.tenant_pipeline(workspace.key, {})  # what a search runs in
        return app.db.tenant(workspace.key, pipeline=True)  # what a write of several statements runs in

    backend: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def caller() -> None:
        async with block() as conn:
            await conn.execute("SELECT count(*) FROM memory_events")  # pipelined: sent, its result read at the exit
            backend.set_result(conn.info.backend_pid)
            if where == "block":
                await asyncio.Event().wait()  # the caller's own await, after the statement went out
            # else the block ends: its COMMIT waits for the statement's result, and is cancelled there

    holder = await psycopg.AsyncConnection.connect(pg_dsn)
    monitor = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    task: asyncio.Task[None] | None = None
    try:
        # memory_events, not memories: entering a workspace holds memories (migration 0016),
        # so the entry would wait instead of the caller's statement, and the check below that
        # the pool serves afterwards would wait too.
        await holder.execute("LOCK TABLE memory_events IN ACCESS EXCLUSIVE MODE")
        task = asyncio.create_task(caller())
        pid = await asyncio.wait_for(backend, GIVE_UP_SECONDS)
        reached = time.monotonic() + GIVE_UP_SECONDS
        while not await _waiting(monitor, pid):  # until the statement waits on the lock
            assert time.monotonic() < reached, "the statement never waited on the lock"
            await asyncio.sleep(0.02)  # a poll interval: the condition is re-read
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=GIVE_UP_SECONDS)
        assert task in done, f"the cancelled {kind} still waits for its statement {GIVE_UP_SECONDS} s later"
        assert task.cancelled()
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while await _waiting(monitor, pid):
            assert time.monotonic() < deadline, f"the statement of the cancelled {kind} still waits on the lock"
            await asyncio.sleep(0.05)
        async with app.db.tenant(workspace.key) as conn:  # and the pool serves afterwards
            cur = await conn.execute("SELECT 1 AS one")
            assert (await cur.fetchone()) == {"one": 1}
    finally:
        await holder.rollback()  # a task still waiting (the code before) gets its result now
        if task is not None:
            await asyncio.wait({task}, timeout=GIVE_UP_SECONDS)
        await holder.close()
        await monitor.close()
