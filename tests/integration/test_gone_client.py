"""A pooled connection whose client vanished while its statement waited on a lock (psycopg
closes it when a cancel does not land within 5 s): PostgreSQL ends the backend within
about CLIENT_CHECK_INTERVAL_MS instead of leaving it queued on the lock until
statement_timeout. On the code before (no client_connection_check_interval) the backend
was still waiting when this test gave up."""

from __future__ import annotations

import asyncio
import time

import psycopg

from memplane.server.storage.database import CLIENT_CHECK_INTERVAL_MS, Database

GIVE_UP_SECONDS = 10 * CLIENT_CHECK_INTERVAL_MS / 1000


async def test_a_backend_waiting_on_a_lock_ends_when_its_client_is_gone(pg_dsn: str) -> None:
    db = Database(pg_dsn, min_size=1, max_size=2)
    await db.open()
    holder = await psycopg.AsyncConnection.connect(pg_dsn)
    monitor = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    try:
        await holder.execute("LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE")
        async with db.admin() as conn:
            pid = conn.info.backend_pid
            conn.pgconn.send_query(b"SELECT count(*) FROM schema_migrations")  # blocks on the lock

            async def state() -> str | None:
                cur = await monitor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
                row = await cur.fetchone()
                return None if row is None else str(row[0])

            reached = time.monotonic() + GIVE_UP_SECONDS
            while await state() != "Lock":  # until the statement waits on the lock
                assert time.monotonic() < reached, "the statement never waited on the lock"
                await asyncio.sleep(0.02)
            conn.pgconn.finish()  # the client is gone without a cancel
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while await state() is not None:
            assert time.monotonic() < deadline, "the backend still waits on the lock for a client that is gone"
            await asyncio.sleep(0.05)  # a poll interval: the condition is re-read
    finally:
        await holder.rollback()
        await holder.close()
        await monitor.close()
        await db.close()
