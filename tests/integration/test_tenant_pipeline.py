"""`Database.tenant_pipeline` (what every search runs in) sends no BEGIN or COMMIT: its
statements run as the one implicit transaction PostgreSQL makes of a pipeline up to its
Sync. These tests hold it to what the explicit transaction gave: the role, workspace and
settings hold for every statement of the block, row-level security confines each one to
the block's workspace, nothing of them is left on the pooled connection afterwards, and
the block can only read (the read-only setting is new: on the code before, the write
below was stored)."""

from __future__ import annotations

import psycopg
import pytest

from memplane.domain.models import NewMemory, Scope, Workspace
from memplane.errors import UnauthenticatedError
from memplane.server.app import App
from memplane.server.storage.database import Database
from tests.integration.conftest import TenantFactory, principal
from tests.support import unit_vectors

STATE = (
    "SELECT current_user AS role, current_setting('memplane.workspace_key', true) AS workspace_key,"
    " current_setting('transaction_read_only') AS read_only, current_setting('hnsw.ef_search', true) AS ef_search,"
    " (SELECT count(*) FROM memories) AS memories, pg_backend_pid() AS pid"
)


async def _seed(app: App, ws: Workspace, count: int) -> None:
    vectors = unit_vectors(count, seed=count)
    memories = [
        NewMemory(content=f"memory {i} of {ws.name}", scope=Scope(user_id="u"), embedding=tuple(vectors[i]))
        for i in range(count)
    ]
    await app.writeback.add(principal(ws), ws, memories, request_id=f"seed-{ws.name}")


async def test_settings_hold_for_every_statement_and_end_with_the_block(
    app: App, tenant_factory: TenantFactory, pg_dsn: str
) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    await _seed(app, a, 3)
    await _seed(app, b, 5)
    db = Database(pg_dsn, min_size=1, max_size=1)  # one connection: the one after the block is the same
    await db.open()
    try:
        async with db.tenant_pipeline(a.key, {"hnsw.ef_search": "123"}) as conn:
            first = await conn.execute(STATE)
            await conn.execute("SELECT count(*) FROM memories WHERE content LIKE 'memory%'")
            last = await conn.execute(STATE)
        rows = [await first.fetchone(), await last.fetchone()]
        for row in rows:
            assert row is not None
            assert (row["role"], row["workspace_key"], row["read_only"], row["ef_search"], row["memories"]) == (
                "memplane_tenant",
                str(a.key),
                "on",
                "123",
                3,
            )
        async with db._connection() as conn:  # the pool's only connection, handed out again
            cur = await conn.execute(STATE)
            after = await cur.fetchone()
            assert conn.autocommit is False
            await conn.rollback()
        assert after is not None
        assert rows[0] is not None
        assert after["pid"] == rows[0]["pid"]
        assert after["role"] != "memplane_tenant"
        assert after["workspace_key"] in (None, "")
        assert after["read_only"] == "off"
        assert after["ef_search"] != "123"
        assert after["memories"] >= 8  # the owner, without the tenant's role: both workspaces (and other tests')

        async with db.tenant_pipeline(b.key, {}) as conn:  # the next block on it is b's alone
            cur = await conn.execute(STATE)
        row = await cur.fetchone()
        assert row is not None
        assert (row["workspace_key"], row["memories"]) == (str(b.key), 5)
    finally:
        await db.close()


async def test_a_write_in_the_block_is_refused_and_nothing_is_stored(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    await _seed(app, ws, 2)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        async with app.db.tenant_pipeline(ws.key, {}) as conn:
            await conn.execute("DELETE FROM memories")
    async with app.db.tenant(ws.key) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM memories")
        row = await cur.fetchone()
    assert row is not None
    assert row["n"] == 2


async def test_a_deleted_workspace_is_refused_and_the_connection_serves_the_next_block(
    app: App, tenant_factory: TenantFactory, pg_dsn: str
) -> None:
    """The block's first statement fails (the workspace went: memplane_enter_workspace
    raises) and every statement after it is skipped until the Sync: the caller gets
    UnauthenticatedError, and the pool's one connection comes back in transaction mode and
    runs the next block, of another workspace, as its own."""
    gone, kept = await tenant_factory(), await tenant_factory()
    await _seed(app, kept, 2)
    await app.admin.delete_workspace(gone.name)
    db = Database(pg_dsn, min_size=1, max_size=1)
    await db.open()
    try:
        with pytest.raises(UnauthenticatedError):
            async with db.tenant_pipeline(gone.key, {}) as conn:
                await conn.execute("SELECT count(*) FROM memories")
        async with db.tenant_pipeline(kept.key, {}) as conn:
            assert conn.autocommit is True
            cur = await conn.execute(STATE)
        row = await cur.fetchone()
        assert row is not None
        assert (row["workspace_key"], row["memories"], row["read_only"]) == (str(kept.key), 2, "on")
        async with db._connection() as conn:
            assert conn.autocommit is False
    finally:
        await db.close()
