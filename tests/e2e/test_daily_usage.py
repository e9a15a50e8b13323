"""Searches per workspace and UTC day (issue 29, the usage view's plot): counted in the
retrieval process's memory, flushed to table search_counts in the background and at
graceful shutdown, read with the workspace's key through GetDailyUsage beside the
memories added per day."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError
from memplane.server.app import App, build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.serving import serve, stop_serving
from memplane.server.settings import RetrievalSettings
from memplane.server.storage.workspaces import WorkspaceStore
from tests.fix_server import TestWorkspace, WorkspaceFactory, settings_for
from tests.support import fields, mem


def _today(usage: object) -> tuple[int, int]:
    day = usage.days[-1]  # type: ignore[attr-defined]
    assert day.start_time.ToDatetime(tzinfo=UTC).date() == datetime.now(UTC).date()
    return day.memories_added, day.search_count


async def test_searches_and_memories_added_per_day(workspace_factory: WorkspaceFactory) -> None:
    ws, other = await workspace_factory(), await workspace_factory()
    await ws.client.add_memories([mem("Maria adopted a dog named Pixel"), mem("The cabin is by the lake")])
    for query in ("dog", "lake", "cabin"):
        await ws.client.search(query)
    await ws.client.search(["two", "queries"])  # one call, one search
    await ws.client.select_memory_files("dog")
    with pytest.raises(InvalidArgumentError):
        await ws.client.search("refused", top_k=10_000)  # refused: not a search
    usage = await ws.client.get_daily_usage(7)
    assert len(usage.days) == 7
    assert _today(usage) == (2, 5)
    assert all(d.search_count == 0 and d.memories_added == 0 for d in usage.days[:-1])
    starts = [d.start_time.ToDatetime() for d in usage.days]
    assert starts == sorted(starts)
    assert all(s.hour == 0 and s.minute == 0 for s in starts)
    assert len((await ws.client.get_daily_usage()).days) == 14  # 0: the default
    assert _today(await other.client.get_daily_usage(1)) == (0, 0)  # another workspace sees none of them


@pytest.mark.parametrize("days", [-1, 61])
async def test_days_out_of_range_is_refused_naming_the_field(workspace: TestWorkspace, days: int) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.get_daily_usage(days)
    assert fields(caught.value) == ["days"]


async def _retrieval_app(
    pg_dsn: str, embedder: CachedEmbedder, admin_key: str, tmp: pytest.TempPathFactory, flush_seconds: float
) -> App:
    """A retrieval server's app of its own, flushing its search counts every *flush_seconds*."""
    settings = settings_for(tmp.mktemp("counter"), pg_dsn, admin_key)
    settings = settings.model_copy(update={"retrieval": RetrievalSettings(search_count_flush_seconds=flush_seconds)})
    app = await build_app(settings, ["retrieval"], embedder=embedder)
    app.start()
    return app


async def _stored(pg_dsn: str, workspace: str) -> int:
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(
            "SELECT coalesce(sum(c.searches), 0) FROM search_counts c JOIN workspaces w ON w.key = c.workspace_key"
            " WHERE w.name = %s",
            (workspace,),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_graceful_shutdown_flushes_the_counted_searches(
    pg_dsn: str,
    embedder: CachedEmbedder,
    admin_key: str,
    tmp_path_factory: pytest.TempPathFactory,
    workspace: TestWorkspace,
) -> None:
    app = await _retrieval_app(pg_dsn, embedder, admin_key, tmp_path_factory, 3600)  # no periodic flush comes
    running = await serve(app, host="127.0.0.1", port=0)
    async with AsyncMemplaneClient(f"127.0.0.1:{running.port}", workspace.key) as client:
        for query in ("one", "two", "three"):
            await client.search(query)
    assert app.searches is not None
    assert app.searches.pending() == 3
    assert await _stored(pg_dsn, workspace.name) == 0  # nothing written on the search path
    await stop_serving(running, app)
    assert await _stored(pg_dsn, workspace.name) == 3
    assert _today(await workspace.client.get_daily_usage(1)) == (0, 3)  # the session's server reads them


async def test_the_background_flush_writes_without_a_reader(
    pg_dsn: str,
    embedder: CachedEmbedder,
    admin_key: str,
    tmp_path_factory: pytest.TempPathFactory,
    workspace: TestWorkspace,
) -> None:
    app = await _retrieval_app(pg_dsn, embedder, admin_key, tmp_path_factory, 0.05)
    running = await serve(app, host="127.0.0.1", port=0)
    try:
        async with AsyncMemplaneClient(f"127.0.0.1:{running.port}", workspace.key) as client:
            await client.search("flushed in the background")
        for _ in range(600):  # 30 s at most
            if await _stored(pg_dsn, workspace.name) == 1:  # the periodic flush, polled
                break
            await asyncio.sleep(0.05)  # not a connection per loop turn, back to back
        else:
            raise AssertionError("the periodic flush never wrote the search")
    finally:
        await stop_serving(running, app)


async def test_a_deleted_workspaces_pending_searches_are_dropped_not_retried(
    pg_dsn: str,
    embedder: CachedEmbedder,
    admin_key: str,
    tmp_path_factory: pytest.TempPathFactory,
    workspace_factory: WorkspaceFactory,
    admin_client: AsyncMemplaneClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gone, kept = await workspace_factory(), await workspace_factory()
    app = await _retrieval_app(pg_dsn, embedder, admin_key, tmp_path_factory, 3600)  # no periodic flush comes
    running = await serve(app, host="127.0.0.1", port=0)
    for ws in (gone, kept):
        async with AsyncMemplaneClient(f"127.0.0.1:{running.port}", ws.key) as client:
            await client.search("counted")
    await admin_client.delete_workspace(gone.name)
    assert app.searches is not None
    await app.searches.flush()  # the deleted workspace's count goes with it; the other's is written
    assert app.searches.pending() == 0
    assert await _stored(pg_dsn, kept.name) == 1
    with caplog.at_level("WARNING", logger="memplane"):
        await stop_serving(running, app)
    assert not [r for r in caplog.records if "searches" in r.getMessage()], caplog.text


async def test_a_reader_waits_for_a_flush_in_flight(
    pg_dsn: str,
    embedder: CachedEmbedder,
    admin_key: str,
    tmp_path_factory: pytest.TempPathFactory,
    workspace: TestWorkspace,
) -> None:
    """GetDailyUsage flushes its workspace's pending searches first; a flush already in
    flight (the periodic one) has taken them out of the pending counts, so the reader must
    wait for it, or it reads the day without them."""
    app = await _retrieval_app(pg_dsn, embedder, admin_key, tmp_path_factory, 3600)
    assert app.searches is not None
    assert app.daily_usage is not None
    try:
        key = await _workspace_key(pg_dsn, workspace.name)
        app.searches.count(key)
        await app.searches.flush()  # the day's row exists: 1
        app.searches.count(key)
        async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
            await holder.execute("SELECT * FROM search_counts WHERE workspace_key = %s FOR UPDATE", (key,))
            in_flight = asyncio.ensure_future(app.searches.flush())  # its UPSERT waits for the row
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as watcher:
                for _ in range(3000):  # 30 s at most
                    if await _waiting_on_a_lock(watcher, "search_counts"):
                        break
                    await asyncio.sleep(0.01)  # between looks at pg_stat_activity
                else:
                    raise AssertionError("the flush's UPSERT never waited for the held row")
            info = await WorkspaceStore(app.db).get_by_key(key)
            reading = asyncio.ensure_future(app.daily_usage.days(info, 1))
            await asyncio.wait({reading}, timeout=0.5)  # a reader that does not wait reads and returns now
            await holder.rollback()  # the in-flight flush goes on
        await in_flight
        [today] = await reading
        assert today.searches == 2
    finally:
        await app.close()


async def _workspace_key(pg_dsn: str, name: str) -> int:
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        row = await (await conn.execute("SELECT key FROM workspaces WHERE name = %s", (name,))).fetchone()
    assert row is not None
    return int(row[0])


async def _waiting_on_a_lock(conn: psycopg.AsyncConnection[object], table: str) -> bool:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s", (f"%{table}%",)
    )
    row = await cur.fetchone()
    return bool(row and row[0])
