"""Group commit over gRPC on the real database: one-memory adds that arrive while their
workspace's inserts are in flight are committed in one transaction (their rows share
one xmin), and each caller still gets its own memories, request id, duplicates and
errors, exactly as alone.

To make the adds wait deterministically, the test holds `memories` (the lock every write's
`memplane_enter_workspace` takes, ACCESS SHARE) in ACCESS EXCLUSIVE mode: the first
`max_inflight` adds are sent first and block in the database, the others then wait in the
group committer; the test releases the lock once the committer holds all of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg

from memplane.errors import QuotaExceededError
from memplane.server.app import App
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import list_all, mem, unit_vectors, workspace_key

T = TypeVar("T")
WAIT_SECONDS = 60.0


async def transactions(pg_dsn: str, key: int) -> list[int]:
    """How many of the workspace's adds each transaction stored, largest first: by the xmin
    of their ADD events, written with the rows and never updated (the rows' own xmin moves
    when the vector indexer puts them into the graph)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM memory_events WHERE workspace_key = %s AND kind = 'ADD'"
            " GROUP BY xmin::text ORDER BY 1 DESC",
            (key,),
        )
        return [int(r[0]) for r in await cur.fetchall()]


@asynccontextmanager
async def writes_held(pg_dsn: str) -> AsyncIterator[None]:
    """While the block runs, every write's entry into its workspace waits."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn, conn.transaction():
        await conn.execute("LOCK TABLE ONLY memories IN ACCESS EXCLUSIVE MODE")
        yield


# What an add running alone sends (`memplane_insert_memories` on an autocommit connection).
ALONE = "SELECT claimed, duplicate_ords, duplicate_ids FROM memplane_insert_memories(%"


async def waiting_backends(pg_dsn: str, query_like: str, waited: float = 0.0) -> list[int]:
    """Pids of the backends queued on a lock for more than *waited* seconds while running a
    statement like *query_like*."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT DISTINCT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted"
            " WHERE a.query LIKE %s AND (%s = 0 OR now() - l.waitstart > make_interval(secs => %s)) ORDER BY 1",
            (query_like, waited, waited),
        )
        return [int(r[0]) for r in await cur.fetchall()]


async def until_waiting(
    pg_dsn: str, query_like: str, count: int, calls: Sequence[asyncio.Future[Any]] = (), *, waited: float = 0.0
) -> list[int]:
    """Wait until exactly *count* backends are queued (for more than *waited* seconds)
    running *query_like*; their pids. Fails at once if one of *calls* (adds that should be
    among them) has ended."""
    async with asyncio.timeout(WAIT_SECONDS):
        while len(pids := await waiting_backends(pg_dsn, query_like, waited)) != count:
            ended = [c for c in calls if c.done()]
            assert not ended, f"an add ended while {len(pids)} of {count} waited: {ended[0]!r}"
            await asyncio.sleep(0.01)
    return pids


async def until_queued(app: App, key: int, count: int) -> None:
    """Wait until *count* adds of workspace *key* wait in the group committer."""
    assert app.writeback is not None
    async with asyncio.timeout(WAIT_SECONDS):
        while app.writeback.committer.waiting(key) != count:  # noqa: ASYNC110  # the committer's count raises no event
            await asyncio.sleep(0.01)


async def held_then_released(app: App, pg_dsn: str, key: int, calls: list[Awaitable[T]]) -> list[T | BaseException]:
    """Run *calls* (adds to workspace *key*, at most quota.max_concurrent_requests_per_workspace
    of them: more would wait before the committer) while writes are held: the first
    group_commit.max_inflight of them first, until each is queued in the database alone,
    then the others, until they wait in the committer; then release them all and return
    their outcomes, in order."""
    assert app.writeback is not None
    assert len(calls) <= app.settings.quota.max_concurrent_requests_per_workspace
    inflight = app.settings.group_commit.max_inflight
    async with writes_held(pg_dsn):
        first = [asyncio.ensure_future(c) for c in calls[:inflight]]
        await until_waiting(pg_dsn, ALONE, inflight, first)
        rest = [asyncio.ensure_future(c) for c in calls[inflight:]]
        await until_queued(app, key, len(rest))
    return list(await asyncio.gather(*first, *rest, return_exceptions=True))


def one(text: str, index: int, *, user_id: str = "u1") -> list[memory_pb2.MemoryInput]:
    return [mem(text, user_id=user_id, embedding=unit_vectors(1, seed=index)[0])]


async def test_adds_that_wait_commit_together_and_each_caller_gets_its_own(
    app: App, pg_dsn: str, workspace: TestWorkspace
) -> None:
    key = await workspace_key(pg_dsn, workspace.name)
    texts = [f"Fact number {i} about the user" for i in range(8)]
    calls = [
        workspace.client.add_memories(one(t, i, user_id=f"u{i % 3}"), request_id=f"req-{i}")
        for i, t in enumerate(texts)
    ]
    replies: list[Any] = await held_then_released(app, pg_dsn, key, calls)
    inflight = app.settings.group_commit.max_inflight
    # the adds in flight alone, the six others' in one transaction
    assert await transactions(pg_dsn, key) == [len(texts) - inflight] + [1] * inflight
    for i, reply in enumerate(replies):
        assert [(m.content, m.scope.user_id) for m in reply] == [(texts[i], f"u{i % 3}")]
        events = await workspace.client.list_memory_events(reply[0].id)
        assert [(e.request_id, e.kind) for e in events] == [(f"req-{i}", memory_pb2.EVENT_KIND_ADD)]
    assert len({r[0].id for r in replies}) == len(texts)
    assert len(await list_all(workspace.client)) == len(texts)
    # a retry of a grouped add is answered from its own record
    assert await workspace.client.add_memories(one(texts[5], 5, user_id="u2"), request_id="req-5") == replies[5]


async def test_duplicates_and_repeated_request_ids_within_a_group(
    app: App, pg_dsn: str, workspace: TestWorkspace
) -> None:
    key = await workspace_key(pg_dsn, workspace.name)
    inflight = app.settings.group_commit.max_inflight
    fillers = [workspace.client.add_memories(one(f"filler {i}", 100 + i), request_id=f"f-{i}") for i in range(inflight)]
    calls = [
        *fillers,
        workspace.client.add_memories_reply(one("Lives in Porto", 1), request_id="a"),
        workspace.client.add_memories_reply(one("lives in  PORTO", 2), request_id="b"),  # the same, normalised
        workspace.client.add_memories_reply(one("Has a cat", 3), request_id="c"),
        workspace.client.add_memories_reply(one("Has a cat", 3), request_id="c"),  # a retry sent at once
    ]
    outcomes: list[Any] = await held_then_released(app, pg_dsn, key, calls)
    a, b, c1, c2 = outcomes[inflight:]
    assert await transactions(pg_dsn, key) == [2] + [1] * inflight  # "Lives in Porto" and "Has a cat"
    assert list(a.duplicate_indexes) == []
    assert list(b.duplicate_indexes) == [0]
    assert b.memories[0].id == a.memories[0].id
    assert c1 == c2
    contents = sorted(m.content for m in await list_all(workspace.client))
    assert contents == sorted(["Has a cat", "Lives in Porto", *(f"filler {i}" for i in range(inflight))])
    events = await workspace.client.list_memory_events(a.memories[0].id)
    kinds = [(e.request_id, e.kind) for e in events]
    assert kinds == [("a", memory_pb2.EVENT_KIND_ADD), ("b", memory_pb2.EVENT_KIND_NOOP)]


async def test_a_member_over_its_quota_fails_alone(
    app: App, pg_dsn: str, workspace_factory: WorkspaceFactory, admin_client: Any
) -> None:
    workspace = await workspace_factory(max_memories=7)
    key = await workspace_key(pg_dsn, workspace.name)
    calls = [workspace.client.add_memories(one(f"fact {i}", i), request_id=f"q-{i}") for i in range(8)]
    outcomes = await held_then_released(app, pg_dsn, key, calls)
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(refused) == 1
    assert isinstance(refused[0], QuotaExceededError)
    assert (await admin_client.get_workspace_usage(workspace.name)).memory_count == 7
    stored = {o[0].content for o in outcomes if not isinstance(o, BaseException)}
    assert {m.content for m in await list_all(workspace.client)} == stored
    assert len(stored) == 7
