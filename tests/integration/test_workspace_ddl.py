"""Creating and deleting workspaces (partition DDL, ACCESS EXCLUSIVE on the parent tables)
while another workspace is searched and written: the tenant's statements never fail. A
search locks lexeme_df before memories, a write memories before lexeme_df; a DDL that held
one parent while waiting for the other closed a lock cycle, and PostgreSQL's deadlock
detector aborted whichever waiter checked first — often the tenant's statement."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from psycopg import sql

from memplane.domain.models import NewMemory
from memplane.errors import NotFoundError, UnavailableError
from memplane.server.app import App
from memplane.server.storage import workspaces
from memplane.server.storage.search import SearchSpec
from tests.fix_server import random_workspace_name
from tests.integration.conftest import TenantFactory, principal
from tests.integration.test_search_sql import TEXTS, run, seeded, spec

ROUNDS = 12  # create + delete cycles; each took several parent locks


async def test_partition_ddl_never_aborts_a_tenants_search_or_write(app: App, tenant_factory: TenantFactory) -> None:
    ws, query = await seeded(app, tenant_factory)
    lexical: SearchSpec = spec(use_vector=False)
    failures: list[BaseException] = []
    done = asyncio.Event()
    counts = {"search": 0, "write": 0}

    async def searcher() -> None:
        while not done.is_set():
            try:
                await run(app, ws, lexical, "Caroline support group lake", None)
                await run(app, ws, spec(), "Melanie pottery class", query)
                counts["search"] += 2
            except Exception as error:  # every failure is the finding
                failures.append(error)

    async def writer() -> None:
        n = 0
        while not done.is_set():
            try:
                await app.writeback.add(principal(ws), ws, [NewMemory(content=f"{TEXTS[n % len(TEXTS)]} {n}")])
                counts["write"] += 1
                n += 1
            except Exception as error:
                failures.append(error)

    tasks = [asyncio.create_task(f()) for f in (searcher, searcher, writer)]
    try:
        for _ in range(ROUNDS):
            made = await app.admin.create_workspace(random_workspace_name())
            await app.admin.delete_workspace(made.name)
    finally:
        done.set()
        await asyncio.gather(*tasks)
    assert failures == [], failures[:3]
    assert counts["search"] > 0  # the DDL ran beside real traffic
    assert counts["write"] > 0


async def test_ddl_that_cannot_lock_gives_up_unavailable_and_writes_nothing(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement holding a parent table past every try: create and delete answer
    UNAVAILABLE (retryable), and neither leaves a half-made or half-dropped workspace."""
    monkeypatch.setattr(workspaces, "DDL_LOCK_ATTEMPTS", 2)
    kept = await app.admin.create_workspace(random_workspace_name())
    name = random_workspace_name()
    try:
        async with app.db.admin() as holder:  # a long read of lexeme_df, open across the calls
            await holder.execute("LOCK TABLE lexeme_df IN ACCESS SHARE MODE")
            with pytest.raises(UnavailableError, match="locked"):
                await app.admin.create_workspace(name)
            with pytest.raises(UnavailableError, match="locked"):
                await app.admin.delete_workspace(kept.name)
        with pytest.raises(NotFoundError):
            await app.admin.get_workspace(name)  # no row, so no partition of it either
        assert (await app.admin.get_workspace(kept.name)).key == kept.key  # still whole
        await app.admin.create_workspace(name)  # the lock gone, both work
    finally:
        for n in (name, kept.name):
            with contextlib.suppress(NotFoundError):
                await app.admin.delete_workspace(n)


async def test_vacuum_or_analyze_of_another_workspace_blocks_no_create_or_delete(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VACUUM and ANALYZE (autovacuum's, or the partition analyzer's) hold one workspace's
    partition in SHARE UPDATE EXCLUSIVE for as long as they run, seconds on a big one.
    Creating and deleting *other* workspaces lock only the parent tables and their own
    partitions, so they go ahead at the first try beside it."""
    monkeypatch.setattr(workspaces, "DDL_LOCK_ATTEMPTS", 1)  # no waiting it out
    busy = await app.admin.create_workspace(random_workspace_name())
    gone = await app.admin.create_workspace(random_workspace_name())
    made = None
    try:
        async with app.db.admin() as vacuum:  # stands for a VACUUM of busy's partitions, open across the calls
            for table in workspaces.PARTITIONED_TABLES:
                partition = workspaces.partition_name(table, busy.key)
                await vacuum.execute(
                    sql.SQL("LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE").format(sql.Identifier(partition))
                )
            made = await app.admin.create_workspace(random_workspace_name())
            await app.admin.delete_workspace(gone.name)
        with pytest.raises(NotFoundError):
            await app.admin.get_workspace(gone.name)
        assert (await app.admin.get_workspace(made.name)).key == made.key
    finally:
        for ws in (busy, gone, made):
            if ws is not None:
                with contextlib.suppress(NotFoundError):
                    await app.admin.delete_workspace(ws.name)


async def test_a_deletion_whose_own_partitions_stay_held_answers_unavailable_and_drops_nothing(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A VACUUM of the workspace's own partitions that outlasts the wait before the drop
    (`_outwait_vacuum`, here 100 ms; an autovacuum would be cancelled, a manual VACUUM or an
    ANALYZE is not) and the drop's tries: UNAVAILABLE, the workspace whole; once the lock
    goes, the deletion goes through."""
    monkeypatch.setattr(workspaces, "OWN_LOCK_TIMEOUT", "100ms")
    monkeypatch.setattr(workspaces, "DDL_LOCK_ATTEMPTS", 2)
    ws = await app.admin.create_workspace(random_workspace_name())
    try:
        async with app.db.admin() as vacuum:
            await vacuum.execute(workspaces._lock_own(ws.key, "SHARE UPDATE EXCLUSIVE"))
            with pytest.raises(UnavailableError, match="locked"):
                await app.admin.delete_workspace(ws.name)
        assert (await app.admin.get_workspace(ws.name)).key == ws.key
        async with app.db.admin() as conn:
            cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS kept", (f"memories_w{ws.key}",))
            assert (await cur.fetchone() or {}).get("kept") is True
        await app.admin.delete_workspace(ws.name)
        with pytest.raises(NotFoundError):
            await app.admin.get_workspace(ws.name)
    finally:
        with contextlib.suppress(NotFoundError):
            await app.admin.delete_workspace(ws.name)


async def test_the_wait_before_a_drop_passes_over_partitions_already_gone(app: App) -> None:
    """On a placed workspace whose cluster's part went before (a deletion cut short) the
    wait finds no partition to lock: nothing to wait for, no error, the drop goes on."""
    async with app.db.admin() as conn:
        cur = await conn.execute("SELECT coalesce(max(key), 0) + 1000 AS key FROM workspaces")
        unused = int((await cur.fetchone() or {"key": 0})["key"])
    await workspaces._outwait_vacuum(app.db, unused)  # raises nothing
