"""The vector indexer across a database outage (`memplane.server.storage.vector_index`): a
`memplane serve` holding a backlog (a small write's memory, outside the HNSW graph) loses
its PostgreSQL (SIGKILL) before its pass; every pass fails while the database is down.
The log says so once, at ERROR with the traceback, and each retry after that at DEBUG;
once PostgreSQL is back the backlog is put into the graph by itself and the log says the
passes succeed again.

On the code before, every failed pass logged an ERROR with its traceback and the next was
tried two gathers later: with the default 0.2 s gather, two and a half tracebacks a second
for as long as the outage lasted."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from tests.faults.conftest import POLL_SECONDS, KillablePostgres, ServerProcess
from tests.support import mem

GATHER_SECONDS = 2.0  # the indexer's gather: its pass starts this long after the write, when PostgreSQL is gone
FAILED_PASSES = 3  # failed passes awaited before the log is judged
FAILED = re.compile(
    r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR) memplane\.server\.storage\.vector_index: vector indexing pass failed",
    re.MULTILINE,
)


async def _failed_passes(server: ServerProcess, count: int) -> list[str]:
    """The levels of the log's failed-pass lines, once there are *count* (60 s at most)."""
    try:
        async with asyncio.timeout(60):
            while True:
                levels = FAILED.findall(server.log.read_text(errors="replace"))
                if len(levels) >= count:
                    return levels
                await asyncio.sleep(POLL_SECONDS)  # between looks at the log
    except TimeoutError:
        pytest.fail(f"fewer than {count} failed passes logged:\n{server.log.read_text(errors='replace')[-3000:]}")


async def _until_logged(server: ServerProcess, text: str) -> None:
    """Until the log holds *text* (60 s at most)."""
    try:
        async with asyncio.timeout(60):
            while True:
                if text in server.log.read_text(errors="replace"):
                    return
                await asyncio.sleep(POLL_SECONDS)  # between looks at the log
    except TimeoutError:
        pytest.fail(f"never logged {text!r}:\n{server.log.read_text(errors='replace')[-3000:]}")


async def test_a_database_outage_is_one_error_in_the_log_and_the_backlog_is_indexed_after_it(
    killable_postgres: KillablePostgres, serve: Callable[..., Awaitable[ServerProcess]], admin_key: str
) -> None:
    server = await serve(
        killable_postgres.dsn,
        MEMPLANE_VECTOR_INDEX__INTERVAL_SECONDS=str(GATHER_SECONDS),
        MEMPLANE_LOG_LEVEL="DEBUG",  # the retries' own lines, to count them
    )
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace("indexer-outage")
        key = (await admin.create_api_key("indexer-outage", "test")).api_key
    async with AsyncMemplaneClient(server.target, key) as client:
        await client.add_memories([mem("the lighthouse keeper logged a storm")])  # outside the graph
    killable_postgres.kill()

    levels = await _failed_passes(server, FAILED_PASSES)
    assert levels.count("ERROR") == 1, levels  # the outage is news once; its retries are not
    assert set(levels[1:]) == {"DEBUG"}, levels

    killable_postgres.start()
    await _until_logged(server, "vector indexing passes succeed again")
    async with await psycopg.AsyncConnection.connect(killable_postgres.dsn) as conn:
        rows = await (await conn.execute("SELECT vector_indexed FROM memories")).fetchall()
    assert rows == [(True,)]  # in the graph; nothing lost or doubled
