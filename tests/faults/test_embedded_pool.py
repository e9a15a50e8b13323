"""The embedded PostgreSQL's pool is sized to the host's cores: `memplane serve` on the
embedded default opens at most twice the cores it may run on (at least 4, at most 16)
connections, however many searches arrive at once; a `database.pool_max_size` that is set
wins. With 16, as every server had before, the same burst opens more than 4: eight
backends then shared two cores with the server and its callers, and per-user search p99
at 8 callers was over 3x p50 (docs/decisions/0005-embedded-pool-sized-to-host.md)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import psycopg

from memplane.client import AsyncMemplaneClient
from memplane.server.storage.embedded import start_embedded
from memplane.v1 import retrieval_pb2
from tests.faults.conftest import ServerProcess
from tests.support import mem

Serve = Callable[..., Awaitable[ServerProcess]]
CALLERS = 8  # quota.max_concurrent_requests_per_workspace: all of them run at once
SEARCHES = 400  # a burst long enough for the pool to grow to whatever it may
LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL


def _expected_default() -> int:
    """2 x the cores this process may run on, within 4..16 (restated from the docs, not
    imported, so that the test checks the code against them)."""
    return min(16, max(4, 2 * len(os.sched_getaffinity(0))))


async def _burst_backends(server: ServerProcess, admin_key: str) -> int:
    """The pool's backends in the server's PostgreSQL (not its two LISTEN connections) after
    SEARCHES searches by CALLERS callers."""
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace("pool")
        key = (await admin.create_api_key("pool", "test")).api_key
    async with AsyncMemplaneClient(server.target, key, timeout=30.0) as client:
        await client.add_memories([mem(f"the ferry to island {i} leaves at dawn") for i in range(20)])
        queue = list(range(SEARCHES))

        async def caller() -> None:
            while queue:
                queue.pop()
                await client.search("ferry island dawn", mode=LEXICAL)

        await asyncio.gather(*(caller() for _ in range(CALLERS)))
    embedded = await asyncio.to_thread(start_embedded, server.data_dir / "pgdata")  # a second hold on it
    try:
        async with await psycopg.AsyncConnection.connect(embedded.dsn) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                " AND application_name NOT LIKE 'memplane-%'"  # the LISTEN connections, outside the pool
            )
            row = await cur.fetchone()
    finally:
        await asyncio.to_thread(embedded.release)
    assert row is not None
    return int(row[0])


async def test_the_embedded_pool_is_twice_the_cores(serve: Serve, admin_key: str) -> None:
    server = await serve(None)
    expected = _expected_default()
    assert f"database pool: up to {expected} connections (the embedded PostgreSQL on" in server.log.read_text()
    assert 2 <= await _burst_backends(server, admin_key) <= expected


async def test_a_pool_max_size_that_is_set_wins(serve: Serve, admin_key: str) -> None:
    server = await serve(None, MEMPLANE_DATABASE__POOL_MAX_SIZE="16")
    assert "database pool: up to 16 connections (database.pool_max_size)" in server.log.read_text()
    assert await _burst_backends(server, admin_key) > 4  # the burst grows a pool that may grow


async def test_a_database_at_a_dsn_keeps_a_pool_of_16(serve: Serve, pg_dsn: str) -> None:
    server = await serve(pg_dsn)
    assert "database pool: up to 16 connections (a database at a dsn)" in server.log.read_text()
