"""Two `memplane serve` processes over one database, as a cluster runs several replicas:
concurrent writers on the same memory and the same scope lose nothing and double nothing.

"Concurrent" is made certain, not hoped for: for the update race the test holds the
memory's row (FOR UPDATE) from its own connection until both servers' transactions are
seen waiting for it in pg_stat_activity, then lets go; both then race for the row."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from memplane.client import AsyncMemplaneClient
from memplane.errors import VersionConflictError
from memplane.v1 import memory_pb2
from tests.faults.conftest import ServerProcess, wait_for_sql
from tests.fix_server import random_workspace_name
from tests.support import mem, unit_vectors

Serve = Callable[..., Awaitable[ServerProcess]]


async def _one(pg_dsn: str, query: str, params: dict[str, Any]) -> Any:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        row = await (await conn.execute(query, params)).fetchone()
    assert row is not None
    return row[0] if len(row) == 1 else tuple(row)


@asynccontextmanager
async def _row_held(pg_dsn: str, memory_id: str) -> AsyncIterator[int]:
    """Hold one memory's row; yields the holder's backend pid."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        await conn.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (memory_id,))
        pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone() or (0,))[0]
        yield int(pid)
        await conn.rollback()


async def _two_servers(serve: Serve, pg_dsn: str, admin_key: str) -> tuple[ServerProcess, ServerProcess, str, int]:
    """Two servers over *pg_dsn* and a fresh workspace: (one, two, its key, its workspace key)."""
    one, two = await asyncio.gather(serve(pg_dsn), serve(pg_dsn))
    name = random_workspace_name()
    async with AsyncMemplaneClient(one.target, admin_key) as admin:
        await admin.create_workspace(name)
        key = (await admin.create_api_key(name, "two servers")).api_key
    workspace_key = await _one(pg_dsn, "SELECT key FROM workspaces WHERE name = %(n)s", {"n": name})
    return one, two, key, int(workspace_key)


async def test_one_update_of_two_with_the_same_expected_version_wins_across_servers(
    pg_dsn: str, serve: Serve, admin_key: str
) -> None:
    one, two, key, workspace_key = await _two_servers(serve, pg_dsn, admin_key)
    async with (
        AsyncMemplaneClient(one.target, key, timeout=120) as a,
        AsyncMemplaneClient(two.target, key, timeout=120) as b,
    ):
        [original] = await a.add_memories([mem("the ferry leaves at nine", user_id="pat")])
        async with _row_held(pg_dsn, original.id) as holder:
            calls = [
                asyncio.ensure_future(
                    client.update_memory(
                        original.id,
                        memory_pb2.MemoryInput(content=f"the ferry leaves at {hour}"),
                        ["content"],
                        expected_version=original.version,
                    )
                )
                for client, hour in ((a, "ten"), (b, "eleven"))
            ]
            await wait_for_sql(
                pg_dsn,
                "SELECT count(*) = 2 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database() AND pid <> %s",
                (holder,),
                "both servers' updates wait for the memory's row",
            )
        results = await asyncio.gather(*calls, return_exceptions=True)
        won = [r for r in results if isinstance(r, memory_pb2.Memory)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1, results
        assert len(lost) == 1
        assert isinstance(lost[0], VersionConflictError), lost  # ABORTED on the wire
        final = await b.get_memory(original.id)
        events = await a.list_memory_events(original.id)
    assert final.content == won[0].content
    assert final.version == original.version + 1 == won[0].version
    assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD, memory_pb2.EVENT_KIND_UPDATE]
    assert events[1].before.content == original.content
    assert events[1].after.content == won[0].content
    stored = await _one(
        pg_dsn,
        "SELECT count(*), sum(version) FROM memories WHERE workspace_key = %(k)s",
        {"k": workspace_key},
    )
    assert stored == (1, original.version + 1)


async def test_concurrent_adds_to_one_scope_from_two_servers_are_counted_exactly(
    pg_dsn: str, serve: Serve, admin_key: str
) -> None:
    one, two, key, workspace_key = await _two_servers(serve, pg_dsn, admin_key)
    calls, per_call = 16, 25
    vectors = unit_vectors(calls * per_call, seed=11)
    async with (
        AsyncMemplaneClient(one.target, key, timeout=120) as a,
        AsyncMemplaneClient(two.target, key, timeout=120) as b,
    ):
        batches = [
            [
                mem(f"deck log {c}-{i}", user_id="pat", session_id="watch-1", embedding=vectors[c * per_call + i])
                for i in range(per_call)
            ]
            for c in range(calls)
        ]
        replies = await asyncio.gather(*((a if c % 2 else b).add_memories(batches[c]) for c in range(calls)))
    async with AsyncMemplaneClient(one.target, admin_key) as admin:
        usage = await admin.get_workspace_usage(
            await _one(pg_dsn, "SELECT name FROM workspaces WHERE key = %(k)s", {"k": workspace_key})
        )
    total = calls * per_call
    assert sum(len(r) for r in replies) == total
    assert len({m.id for r in replies for m in r}) == total
    counts = await _one(
        pg_dsn,
        "SELECT (SELECT count(*) FROM memories WHERE workspace_key = %(k)s AND user_id = 'pat'),"
        " (SELECT count(*) FROM memory_events WHERE workspace_key = %(k)s AND kind = 'ADD'),"
        " (SELECT memory_count FROM workspace_stats WHERE workspace_key = %(k)s),"
        " (SELECT content_bytes FROM workspace_stats WHERE workspace_key = %(k)s),"
        " (SELECT sum(content_bytes) FROM memories WHERE workspace_key = %(k)s)",
        {"k": workspace_key},
    )
    assert counts[:3] == (total, total, total)
    assert counts[3] == counts[4]
    assert usage.memory_count == total
    assert usage.content_bytes == counts[4]
