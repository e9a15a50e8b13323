"""Group commit when things go wrong, over gRPC on the real database: callers whose deadline
passes while their add waits in the committer or while their group is in the database,
and a group whose backend is terminated. Each caller gets its own status, and afterwards
the rows, their ADD events, the workspace's usage and the request ids' records agree.

As in test_group_commit.py, writes are held by a transaction holding `memories` in ACCESS
EXCLUSIVE mode: every add's entry into its workspace waits for it. The test waits on what
it needs to have happened (a backend queued on that lock, running a given statement; a
count of the committer), never on time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import DeadlineExceededError, UnavailableError
from memplane.server.app import App
from memplane.server.storage.vector_index import BACKGROUND_LOCK_TIMEOUT_MS
from tests.e2e.test_group_commit import (
    ALONE,
    WAIT_SECONDS,
    one,
    transactions,
    until_queued,
    until_waiting,
    waiting_backends,
    writes_held,
)
from tests.fix_server import TestWorkspace
from tests.support import list_all, workspace_key

T = TypeVar("T")
HASTY_SECONDS = 2.0  # the deadline of a caller meant to give up while writes are held

# What a backend queued on the held lock runs as a group's entry: a tenant transaction's
# first statement (an add alone runs test_group_commit.ALONE).
GROUP = "SELECT set_config('lock_timeout'%"


# The vector indexer's passes enter their workspace with the same statement as a group and
# queue on the held lock too, but give up after their lock_timeout and retry: a group's entry
# is told from them by how long it has waited.
GROUP_WAITED_SECONDS = 3 * BACKGROUND_LOCK_TIMEOUT_MS / 1000


async def terminate(pg_dsn: str, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert await cur.fetchone() == (True,)


@asynccontextmanager
async def client(server: str, workspace: TestWorkspace, deadline: float) -> AsyncIterator[AsyncMemplaneClient]:
    """A client of *workspace* whose calls have *deadline* seconds and are never retried by it."""
    async with AsyncMemplaneClient(server, workspace.key, timeout=deadline, retry_reads=False) as c:
        yield c


def start(call: Awaitable[T]) -> asyncio.Future[T]:
    return asyncio.ensure_future(call)


async def ledger(pg_dsn: str, key: int) -> dict[str, Any]:
    """What the database holds for the workspace: its rows, its ADD events by request id,
    and the usage counters' memory count."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        rows = await (await conn.execute("SELECT id FROM memories WHERE workspace_key = %s", (key,))).fetchall()
        events = await (
            await conn.execute(
                "SELECT request_id, memory_id FROM memory_events WHERE workspace_key = %s AND kind = 'ADD'",
                (key,),
            )
        ).fetchall()
        counted = await (
            await conn.execute("SELECT memory_count FROM workspace_stats WHERE workspace_key = %s", (key,))
        ).fetchone()
    assert counted is not None
    adds: dict[str, list[str]] = {}
    for request_id, memory_id in events:
        adds.setdefault(str(request_id), []).append(str(memory_id))
    return {"rows": sorted(str(r[0]) for r in rows), "adds": adds, "count": int(counted[0])}


async def assert_consistent(pg_dsn: str, admin_client: Any, workspace: TestWorkspace, key: int) -> dict[str, Any]:
    """Rows, ADD events, usage (the counters and the admin API's) and the listing agree:
    one ADD event per row, none for a row that is not there, each request id once."""
    state = await ledger(pg_dsn, key)
    added = sorted(m for ids in state["adds"].values() for m in ids)
    assert added == state["rows"]
    assert all(len(ids) == 1 for ids in state["adds"].values())
    assert state["count"] == len(state["rows"])
    assert (await admin_client.get_workspace_usage(workspace.name)).memory_count == len(state["rows"])
    assert sorted(m.id for m in await list_all(workspace.client)) == state["rows"]
    return state


async def test_a_caller_whose_deadline_passes_while_it_waits_in_the_committer_is_not_stored(
    app: App, pg_dsn: str, server: str, workspace: TestWorkspace, admin_client: Any
) -> None:
    key = await workspace_key(pg_dsn, workspace.name)
    inflight = app.settings.group_commit.max_inflight
    async with client(server, workspace, WAIT_SECONDS) as patient, client(server, workspace, HASTY_SECONDS) as hasty:
        async with writes_held(pg_dsn):
            fillers = [start(patient.add_memories(one(f"filler {i}", 100 + i), request_id=f"f-{i}")) for i in range(2)]
            await until_waiting(pg_dsn, ALONE, inflight)  # the adds in flight alone, queued on the lock
            gone = [start(hasty.add_memories(one(f"hasty {i}", 200 + i), request_id=f"h-{i}")) for i in range(2)]
            stay = [start(patient.add_memories(one(f"patient {i}", 300 + i), request_id=f"p-{i}")) for i in range(3)]
            await until_queued(app, key, len(gone) + len(stay))
            for call in gone:  # their deadline passes while writes are still held: they wait in the committer
                with pytest.raises(DeadlineExceededError):
                    await call
            await until_queued(app, key, len(stay))  # and have left it
        replies = [await c for c in [*fillers, *stay]]
    # the patient ones went together, without the callers who had left
    assert await transactions(pg_dsn, key) == [len(stay)] + [1] * inflight
    state = await assert_consistent(pg_dsn, admin_client, workspace, key)
    assert state["rows"] == sorted(r[0].id for r in replies)
    assert sorted(state["adds"]) == sorted([*(f"f-{i}" for i in range(2)), *(f"p-{i}" for i in range(3))])
    # a retry of a caller who left stores its add, once
    retried = await workspace.client.add_memories(one("hasty 0", 200), request_id="h-0")
    assert await workspace.client.add_memories(one("hasty 0", 200), request_id="h-0") == retried
    state = await assert_consistent(pg_dsn, admin_client, workspace, key)
    assert state["adds"]["h-0"] == [retried[0].id]
    assert len(state["rows"]) == len(replies) + 1


async def test_a_caller_whose_deadline_passes_while_its_group_is_in_the_database(
    app: App, pg_dsn: str, server: str, workspace: TestWorkspace, admin_client: Any
) -> None:
    """An add alone whose caller leaves is cancelled in the database (not stored); one in a
    group whose caller leaves is committed with its group: a retry of it is answered with
    the memory stored, and nothing is counted twice."""
    key = await workspace_key(pg_dsn, workspace.name)
    inflight = app.settings.group_commit.max_inflight
    assert inflight == 2  # one hasty and one patient add in flight alone
    later = HASTY_SECONDS + 8.0  # the grouped hasty caller leaves after the group is in the database
    async with (
        client(server, workspace, WAIT_SECONDS) as patient,
        client(server, workspace, HASTY_SECONDS) as hasty,
        client(server, workspace, later) as hasty_later,
    ):
        async with writes_held(pg_dsn):
            alone_gone = start(hasty.add_memories(one("alone and gone", 1), request_id="alone-gone"))
            await until_waiting(pg_dsn, ALONE, 1)
            alone_stays = start(patient.add_memories(one("alone and here", 2), request_id="alone-here"))
            await until_waiting(pg_dsn, ALONE, 2)
            grouped_gone = start(hasty_later.add_memories(one("grouped and gone", 3), request_id="group-gone"))
            grouped = [start(patient.add_memories(one(f"grouped {i}", 10 + i), request_id=f"g-{i}")) for i in range(2)]
            await until_queued(app, key, 3)
            with pytest.raises(DeadlineExceededError):
                await alone_gone
            # its statement was cancelled, which let the waiting adds go: as one group, queued on the lock
            await until_waiting(pg_dsn, GROUP, 1, waited=GROUP_WAITED_SECONDS)
            await until_waiting(pg_dsn, ALONE, 1)
            assert app.writeback is not None
            assert app.writeback.committer.waiting(key) == 0
            with pytest.raises(DeadlineExceededError):
                await grouped_gone
        replies = [await c for c in [alone_stays, *grouped]]
    assert await transactions(pg_dsn, key) == [3, 1]  # the group kept the add whose caller left
    state = await assert_consistent(pg_dsn, admin_client, workspace, key)
    assert sorted(state["adds"]) == ["alone-here", "g-0", "g-1", "group-gone"]
    assert {r[0].id for r in replies} < set(state["rows"])
    # the retry of the grouped add is answered with what its group stored; the other stores it now
    again = await workspace.client.add_memories(one("grouped and gone", 3), request_id="group-gone")
    assert [m.id for m in again] == state["adds"]["group-gone"]
    assert again[0].content == "grouped and gone"
    alone = await workspace.client.add_memories(one("alone and gone", 1), request_id="alone-gone")
    state = await assert_consistent(pg_dsn, admin_client, workspace, key)
    assert state["adds"]["alone-gone"] == [alone[0].id]
    assert len(state["rows"]) == 5


async def test_a_group_whose_backend_is_terminated_runs_each_member_alone(
    app: App, pg_dsn: str, server: str, workspace: TestWorkspace, admin_client: Any
) -> None:
    """pg_terminate_backend of a group queued on a lock: nothing of it was committed, and
    each member runs again alone. The lost connection marks the database down until its
    probe answers, so a member that runs meanwhile is refused with UNAVAILABLE (as an add
    alone would be then); the others queue on the lock again and are stored. A retry of a
    refused one stores it once, and every request id's record names what its caller got."""
    key = await workspace_key(pg_dsn, workspace.name)
    assert app.settings.group_commit.max_inflight == 2  # one hasty and one patient add in flight alone
    assert app.writeback is not None
    committer = app.writeback.committer
    fallbacks = committer.fallbacks
    async with client(server, workspace, WAIT_SECONDS) as patient, client(server, workspace, HASTY_SECONDS) as hasty:
        async with writes_held(pg_dsn):
            gone = start(hasty.add_memories(one("filler gone", 100), request_id="f-gone"))
            await until_waiting(pg_dsn, ALONE, 1)
            filler = start(patient.add_memories(one("filler", 101), request_id="f"))
            await until_waiting(pg_dsn, ALONE, 2)
            members = [start(patient.add_memories(one(f"member {i}", i), request_id=f"m-{i}")) for i in range(4)]
            await until_queued(app, key, len(members))
            with pytest.raises(DeadlineExceededError):
                await gone  # its statement cancelled: the waiting adds go, as one group
            [group] = await until_waiting(pg_dsn, GROUP, 1, members, waited=GROUP_WAITED_SECONDS)
            await terminate(pg_dsn, group)
            # the group failed: each member queues on the lock again alone, or was refused at once
            async with asyncio.timeout(WAIT_SECONDS):
                while len(await waiting_backends(pg_dsn, ALONE)) - 1 + sum(m.done() for m in members) < len(members):  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        outcomes = await asyncio.gather(filler, *members, return_exceptions=True)
    assert committer.fallbacks == fallbacks + 1
    refused = [i for i, o in enumerate(outcomes[1:]) if isinstance(o, BaseException)]
    for i in refused:  # refused while the database was marked down (Availability), not with the group's error
        assert isinstance(outcomes[1 + i], UnavailableError), outcomes
        assert "unreachable for" in str(outcomes[1 + i]), outcomes
    assert await transactions(pg_dsn, key) == [1] * (len(outcomes) - len(refused))  # none went together
    state = await assert_consistent(pg_dsn, admin_client, workspace, key)
    assert sorted(state["adds"]) == ["f", *(f"m-{i}" for i in range(len(members)) if i not in refused)]
    replies: list[Any] = [
        o
        if not isinstance(o, BaseException)
        else await workspace.client.add_memories(one(f"member {i}", i), request_id=f"m-{i}")
        for i, o in enumerate(outcomes[1:])
    ]
    state = await assert_consistent(pg_dsn, admin_client, workspace, key)
    assert len(state["rows"]) == 1 + len(members)
    for i, reply in enumerate(replies):
        assert [m.content for m in reply] == [f"member {i}"]
        assert state["adds"][f"m-{i}"] == [reply[0].id]
        # each request id's record names what its caller got
        assert await workspace.client.add_memories(one(f"member {i}", i), request_id=f"m-{i}") == reply
    await assert_consistent(pg_dsn, admin_client, workspace, key)


async def test_a_group_whose_callers_all_left_leaves_the_lock_queue(
    app: App, pg_dsn: str, server: str, workspace: TestWorkspace, admin_client: Any
) -> None:
    key = await workspace_key(pg_dsn, workspace.name)
    async with (
        client(server, workspace, 60.0) as patient,
        client(server, workspace, 2.0) as hasty,
        client(server, workspace, 10.0) as later,
    ):
        async with writes_held(pg_dsn):
            a = start(hasty.add_memories(one("alone, leaves", 1), request_id="a"))
            await until_waiting(pg_dsn, ALONE, 1)
            b = start(patient.add_memories(one("alone, stays", 2), request_id="b"))
            await until_waiting(pg_dsn, ALONE, 2)
            grouped = [start(later.add_memories(one(f"grouped {i}", 10 + i), request_id=f"g-{i}")) for i in range(2)]
            await until_queued(app, key, 2)
            with pytest.raises(DeadlineExceededError):
                await a
            await until_waiting(pg_dsn, ALONE, 1)  # a's statement was cancelled: it left the lock queue
            await until_waiting(pg_dsn, GROUP, 1, waited=GROUP_WAITED_SECONDS)  # the two waiting adds, as one group
            for call in grouped:
                with pytest.raises(DeadlineExceededError):
                    await call
            # Every caller of the group has left: as `a`'s, its statement is cancelled (before the
            # fix it stayed queued until statement_timeout, 30 s, and then the fallback ran both
            # members alone again, for callers long gone).
            await until_waiting(pg_dsn, GROUP, 0, waited=GROUP_WAITED_SECONDS)
            assert len(await waiting_backends(pg_dsn, ALONE)) == 1, "the group's members were re-run alone"
        await b
    assert sorted((await ledger(pg_dsn, key))["adds"]) == ["b"]
