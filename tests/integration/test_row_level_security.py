"""Row-level security is a real second wall: inside `Database.tenant(A)`, SQL without
any workspace condition still sees, changes and creates only A's rows."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from memplane.domain.context import ContextMessage, ToolResultBlock, ToolResultLimits
from memplane.domain.models import ConversationMessage, MessageRole, NewMemory, Scope, Workspace
from memplane.server.app import App
from memplane.server.storage.workspaces import partition_name
from tests.integration.conftest import TenantFactory, principal
from tests.support import unit_vectors

TENANT_TABLES = (
    "memories",
    "memory_events",
    "transcript_messages",
    "idempotency_keys",
    "workspace_counters",
    "tool_result_blobs",
)


async def _seed(app: App, ws: Workspace, count: int, seed: int) -> list[str]:
    vectors = unit_vectors(count, seed=seed)
    stored = await app.writeback.add(
        principal(ws),
        ws,
        [
            NewMemory(content=f"{ws.name} memory {i}", scope=Scope(user_id="shared-user"), embedding=tuple(vectors[i]))
            for i in range(count)
        ],
        request_id=f"seed-{ws.name}",
    )
    await app.conversations.write(
        principal(ws),
        ws,
        Scope(user_id="shared-user", session_id="s1"),
        [ConversationMessage(content=f"hello from {ws.name}", role=MessageRole.USER)],
    )
    long_output = ContextMessage(MessageRole.TOOL, (ToolResultBlock("call-1", f"{ws.name} output line\n" * 500),))
    small = ToolResultLimits(recent_max_bytes=1000, old_max_bytes=1000, keep_last_messages=3, retention_seconds=3600)
    await app.compaction.offloader.compact_tool_results(ws, [long_output], limits=small)  # stores one tool-result blob
    return [m.id for m in stored]


async def _counts(app: App, key: int) -> dict[str, int]:
    out = {}
    async with app.db.tenant(key) as conn:
        for table in TENANT_TABLES:
            cur = await conn.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(table)))
            row = await cur.fetchone()
            assert row is not None
            out[table] = int(row["n"])
    return out


class _RollbackError(Exception):
    """Raised to undo a tenant transaction; carries the statement's row count."""

    def __init__(self, rowcount: int) -> None:
        super().__init__(rowcount)
        self.rowcount = rowcount


async def _rowcount_then_roll_back(app: App, workspace_key: int, statement: str) -> None:
    async with app.db.tenant(workspace_key) as conn:
        cur = await conn.execute(statement)
        raise _RollbackError(cur.rowcount)


async def test_unqualified_reads_see_only_the_tenant_rows(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    ids_a = await _seed(app, a, 3, seed=1)
    ids_b = await _seed(app, b, 2, seed=2)

    # 3 memories + 1 episodic from the conversation; ADD events for each; 1 transcript
    # message; 1 idempotency record; 1 stats row; 1 stored tool output.
    assert await _counts(app, a.key) == {
        "memories": 4,
        "memory_events": 4,
        "transcript_messages": 1,
        "idempotency_keys": 1,
        "workspace_counters": 8,
        "tool_result_blobs": 1,
    }
    assert await _counts(app, b.key) == {
        "memories": 3,
        "memory_events": 3,
        "transcript_messages": 1,
        "idempotency_keys": 1,
        "workspace_counters": 8,
        "tool_result_blobs": 1,
    }
    async with app.db.tenant(a.key) as conn:
        cur = await conn.execute("SELECT id, content FROM memories WHERE id = ANY(%s::uuid[])", (ids_b,))
        assert await cur.fetchall() == []
        cur = await conn.execute("SELECT DISTINCT workspace_key FROM memories")
        assert [r["workspace_key"] for r in await cur.fetchall()] == [a.key]
        cur = await conn.execute("SELECT count(*) AS n FROM memories WHERE id = ANY(%s::uuid[])", (ids_a,))
        row = await cur.fetchone()
        assert row is not None
        assert row["n"] == 3
    # The admin path (schema owner, exempt) does see both, so the filter above was RLS.
    async with app.db.admin() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM memories WHERE workspace_key = ANY(%s)", ([a.key, b.key],))
        row = await cur.fetchone()
        assert row is not None
        assert row["n"] == 7


async def test_unqualified_writes_touch_only_the_tenant_rows(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    await _seed(app, a, 2, seed=3)
    await _seed(app, b, 4, seed=4)
    before_a, before_b = await _counts(app, a.key), await _counts(app, b.key)
    statements = {
        "UPDATE memories SET content = 'overwritten'": "memories",
        "DELETE FROM memories": "memories",
        "UPDATE memory_events SET actor = 'forged'": "memory_events",
        "DELETE FROM transcript_messages": "transcript_messages",
        "UPDATE workspace_counters SET memory_count = 0": "workspace_counters",
        "DELETE FROM tool_result_blobs": "tool_result_blobs",
    }
    for statement, table in statements.items():
        with pytest.raises(_RollbackError) as undone:  # undone: the next statement sees the same rows
            await _rowcount_then_roll_back(app, a.key, statement)
        assert undone.value.rowcount == before_a[table], statement  # A's rows only, never B's
    assert await _counts(app, a.key) == before_a
    assert await _counts(app, b.key) == before_b
    async with app.db.admin() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM memories WHERE content = 'overwritten'")
        row = await cur.fetchone()
        assert row is not None
        assert row["n"] == 0


async def test_a_tenant_cannot_write_rows_of_another_workspace(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        async with app.db.tenant(a.key) as conn:
            await conn.execute(
                "INSERT INTO memory_events (workspace_key, id, memory_id, kind, actor) VALUES (%s, 1, %s, 'ADD', 'x')",
                (b.key, str(uuid.uuid4())),
            )
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        async with app.db.tenant(a.key) as conn:
            await conn.execute(
                "INSERT INTO idempotency_keys (workspace_key, request_id, method, request_hash, result)"
                " VALUES (%s, 'r', 'm', '\\x00', 'null')",
                (b.key,),
            )


async def test_partitions_are_not_reachable_directly_by_the_tenant_role(
    app: App, tenant_factory: TenantFactory
) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    for key in (a.key, b.key):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            async with app.db.tenant(a.key) as conn:
                await conn.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(partition_name("memories", key)))
                )


async def test_tenant_role_cannot_touch_keys_or_workspaces(app: App, tenant_factory: TenantFactory) -> None:
    a = await tenant_factory()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        async with app.db.tenant(a.key) as conn:
            await conn.execute("DELETE FROM memory_events")  # history is append-only for tenants
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        async with app.db.tenant(a.key) as conn:
            await conn.execute("SELECT count(*) FROM api_keys")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        async with app.db.tenant(a.key) as conn:
            await conn.execute("DELETE FROM workspaces")


async def test_document_frequencies_are_kept_per_workspace_and_hidden_from_others(
    app: App, tenant_factory: TenantFactory
) -> None:
    ws_a, ws_b = await tenant_factory(), await tenant_factory()
    for ws, word in ((ws_a, "aardvark"), (ws_b, "zeppelin")):
        vectors = unit_vectors(3, seed=ws.key)
        await app.writeback.add(
            principal(ws),
            ws,
            [NewMemory(content=f"{word} note {i}", embedding=tuple(vectors[i])) for i in range(3)],
        )
    async with app.db.tenant(ws_a.key) as conn:
        rows = await (await conn.execute("SELECT lexeme, sum(df) AS df FROM lexeme_df GROUP BY lexeme")).fetchall()
    seen = {r["lexeme"]: int(r["df"]) for r in rows}
    assert seen["aardvark"] == 3
    assert seen["note"] == 3
    assert "zeppelin" not in seen  # row-level security: another workspace's statistics are invisible
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        async with app.db.tenant(ws_a.key) as conn:
            await conn.execute("DELETE FROM lexeme_df")
