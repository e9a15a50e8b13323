"""The search counts' promise, kept by real `memplane serve` processes stopped for real
(memplane.server.retrieval.usage): a search writes nothing; SIGTERM flushes what was
counted; SIGKILL loses at most what was counted since the last flush, and nothing else;
the periodic flush writes without anyone reading."""

from __future__ import annotations

import signal
from typing import Any

import psycopg

from memplane.client import AsyncMemplaneClient
from tests.faults.conftest import KillablePostgres, ServerProcess, wait_for_sql
from tests.support import mem

NEVER = "3600"  # seconds: a flush interval no test outlives, so only a shutdown flushes
_COUNT = (
    "SELECT coalesce(sum(c.searches), 0) FROM search_counts c JOIN workspaces w ON w.key = c.workspace_key"
    " WHERE w.name = %s"
)


async def _stored(dsn: str, name: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        row = await (await conn.execute(_COUNT, (name,))).fetchone()
    assert row is not None
    return int(row[0])


async def _search(server: ServerProcess, key: str, times: int) -> None:
    async with AsyncMemplaneClient(server.target, key) as client:
        for i in range(times):
            await client.search(f"the lake cabin {i}")


async def test_sigterm_flushes_sigkill_loses_only_the_last_interval(
    killable_postgres: KillablePostgres, serve: Any, admin_key: str
) -> None:
    dsn = killable_postgres.dsn
    first: ServerProcess = await serve(dsn, MEMPLANE_RETRIEVAL__SEARCH_COUNT_FLUSH_SECONDS=NEVER)
    async with AsyncMemplaneClient(first.target, admin_key) as admin:
        await admin.create_workspace("counted")
        key = (await admin.create_api_key("counted", "test")).api_key
    async with AsyncMemplaneClient(first.target, key) as client:
        await client.add_memories([mem("The cabin is by the lake")])
    await _search(first, key, 3)
    assert await _stored(dsn, "counted") == 0  # counted in memory only
    first.process.send_signal(signal.SIGTERM)
    assert await first.process.wait() == 0
    assert await _stored(dsn, "counted") == 3  # the graceful shutdown's flush

    second: ServerProcess = await serve(dsn, MEMPLANE_RETRIEVAL__SEARCH_COUNT_FLUSH_SECONDS=NEVER)
    await _search(second, key, 2)
    second.process.send_signal(signal.SIGKILL)
    await second.process.wait()
    assert await _stored(dsn, "counted") == 3  # the 2 since its last flush are lost, nothing more

    third: ServerProcess = await serve(dsn, MEMPLANE_RETRIEVAL__SEARCH_COUNT_FLUSH_SECONDS="0.2")
    await _search(third, key, 1)
    flushed = "the periodic flush added the third server's search"
    await wait_for_sql(dsn, f"SELECT ({_COUNT}) = 4", ("counted",), flushed)
    async with AsyncMemplaneClient(third.target, key) as client:
        assert (await client.get_daily_usage(1)).days[0].search_count == 4
