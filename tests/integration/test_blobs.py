"""Tool-result blobs and structured transcripts against the real PostgreSQL: storage,
deduplication, verification of claimed cuts, expiry, isolation (WHERE clause and
row-level security), the background cleaner, workspace deletion, and migrations 0003 and
0004 on a database that already holds data."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from memplane.domain.blobs import StoredBlob
from memplane.domain.context import ContextMessage, TextBlock, ToolResultBlock, ToolUseBlock, Truncation
from memplane.domain.models import ConversationMessage, MessageRole, Scope, Workspace
from memplane.server.app import App
from memplane.server.storage.blobs import MAX_RETENTION_SECONDS, MIN_RETENTION_SECONDS, BlobCleaner, ToolResultBlobStore
from memplane.server.storage.database import Database
from memplane.server.storage.migrate import _migrations, apply_migrations
from memplane.server.storage.transcripts import TranscriptStore
from tests.integration.conftest import TenantFactory

SCOPE = Scope(user_id="u1", agent_id="a1", session_id="s1")
OUTPUT = "header\n" + "é中😀 " * 10 + "\r\nlast line without ending"


async def _put(
    app: App,
    ws: Workspace,
    *,
    content: str = OUTPUT,
    now: datetime | None = None,
    retention: timedelta = timedelta(days=3),
    scope: Scope = SCOPE,
    tool_use_id: str = "call-1",
) -> StoredBlob:
    async with app.db.tenant(ws.key) as conn:
        return await ToolResultBlobStore().put(
            conn,
            ws,
            content=content,
            scope=scope,
            tool_use_id=tool_use_id,
            tool_name="shell",
            retention=retention,
            now=now or datetime.now(UTC),
        )


async def _get(app: App, ws: Workspace, ref: str, now: datetime | None = None) -> StoredBlob | None:
    async with app.db.tenant(ws.key) as conn:
        return await ToolResultBlobStore().get(conn, ws, ref, now=now or datetime.now(UTC))


async def _verify(app: App, ws: Workspace, ref: str, head: str, now: datetime | None = None) -> datetime | None:
    async with app.db.tenant(ws.key) as conn:
        return await ToolResultBlobStore().verify(conn, ws, ref, head, now=now or datetime.now(UTC))


async def _count(app: App, ws: Workspace) -> int:
    async with app.db.admin() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM tool_result_blobs WHERE workspace_key = %s", (ws.key,))
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def _exists(app: App, ref: str) -> bool:
    async with app.db.admin() as conn:
        cur = await conn.execute("SELECT 1 FROM tool_result_blobs WHERE id = %s", (uuid.UUID(ref),))
        return await cur.fetchone() is not None


class _UndoError(Exception):
    """Raised to roll a tenant transaction back; carries the statement's row count."""

    def __init__(self, rowcount: int) -> None:
        super().__init__(rowcount)
        self.rowcount = rowcount


async def _delete_all_then_roll_back(app: App, workspace_key: int) -> None:
    async with app.db.tenant(workspace_key) as conn:
        cur = await conn.execute("DELETE FROM tool_result_blobs")
        raise _UndoError(cur.rowcount)


# --------------------------------------------------------------------------- blobs


async def test_put_then_get_returns_the_whole_output(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    now = datetime.now(UTC)
    stored = await _put(app, ws, now=now)
    assert str(uuid.UUID(stored.ref)) == stored.ref
    assert stored.content == OUTPUT
    assert stored.byte_size == len(OUTPUT.encode("utf-8"))
    assert stored.line_count == 3
    assert (stored.tool_use_id, stored.tool_name, stored.session_id) == ("call-1", "shell", "s1")
    assert stored.created_at == now
    assert stored.expires_at == (now + timedelta(days=3)).replace(microsecond=0)
    assert stored.expires_at.tzinfo is not None
    assert await _get(app, ws, stored.ref) == stored
    # One ref, one string: other spellings of the same UUID are not refs.
    plain = stored.ref.replace("-", "")
    for other in (stored.ref.upper(), "{" + stored.ref + "}", plain, "urn:uuid:" + stored.ref, stored.ref + "\n"):
        assert await _get(app, ws, other) is None, other


async def test_line_count_of_edge_contents(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    for content, lines in (("", 0), ("x", 1), ("x\n", 1), ("\n\n", 2), ("a\r\nb", 2), ("a\rb\n", 1)):
        stored = await _put(app, ws, content=content)
        assert (stored.line_count, stored.byte_size) == (lines, len(content.encode())), repr(content)


async def test_expired_unknown_and_malformed_refs_read_as_none(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    now = datetime.now(UTC)
    stored = await _put(app, ws, now=now, retention=timedelta(hours=1))
    assert await _get(app, ws, stored.ref, now=stored.expires_at - timedelta(seconds=1)) is not None
    assert await _get(app, ws, stored.ref, now=stored.expires_at) is None  # expires_at <= now
    assert await _get(app, ws, stored.ref, now=now + timedelta(days=1)) is None
    assert await _get(app, ws, str(uuid.uuid4())) is None
    for bad in ("", "not-a-uuid", "1234", "'; DROP TABLE tool_result_blobs; --", stored.ref + "0", "\x00"):
        assert await _get(app, ws, bad) is None, bad


async def test_put_rejects_bad_input_before_the_database(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    with pytest.raises(ValueError, match="retention"):
        await _put(app, ws, retention=timedelta(milliseconds=500))
    with pytest.raises(ValueError, match="retention"):
        await _put(app, ws, retention=timedelta(seconds=MAX_RETENTION_SECONDS + 1))
    assert MIN_RETENTION_SECONDS == 1
    # Both bounds are allowed.
    await _put(app, ws, content="min", retention=timedelta(seconds=MIN_RETENTION_SECONDS))
    await _put(app, ws, content="max", retention=timedelta(days=365))
    with pytest.raises(ValueError, match="NUL"):
        await _put(app, ws, content="a\x00b")
    with pytest.raises(ValueError, match="timezone"):
        await _put(app, ws, now=datetime(2026, 1, 1))  # noqa: DTZ001 - the naive time is the point


async def test_another_workspaces_blob_is_invisible(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    blob_a = await _put(app, a)
    blob_b = await _put(app, b)
    # The WHERE clause: B's ref asked for as A's.
    assert await _get(app, a, blob_b.ref) is None
    assert await _get(app, b, blob_a.ref) is None
    # Row-level security: in A's transaction, SQL without any workspace condition sees
    # only A's rows and cannot write B's.
    async with app.db.tenant(a.key) as conn:
        cur = await conn.execute("SELECT id FROM tool_result_blobs WHERE id = ANY(%s)", ([blob_a.ref, blob_b.ref],))
        assert [str(r["id"]) for r in await cur.fetchall()] == [blob_a.ref]
        cur = await conn.execute("SELECT DISTINCT workspace_key FROM tool_result_blobs")
        assert [r["workspace_key"] for r in await cur.fetchall()] == [a.key]
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        async with app.db.tenant(a.key) as conn:
            await conn.execute(
                "INSERT INTO tool_result_blobs (workspace_key, id, content, byte_size, line_count, expires_at)"
                " VALUES (%s, %s, 'x', 1, 1, now() + interval '1 day')",
                (b.key, uuid.uuid4()),
            )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # blobs are immutable for tenants
        async with app.db.tenant(a.key) as conn:
            await conn.execute("UPDATE tool_result_blobs SET content = 'forged'")
    with pytest.raises(_UndoError) as undone:
        await _delete_all_then_roll_back(app, a.key)
    assert undone.value.rowcount == 1  # A's blob, never B's
    assert await _exists(app, blob_a.ref)
    assert await _exists(app, blob_b.ref)


async def test_delete_by_scope_erases_only_matching_blobs(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    mine = await _put(app, a, scope=Scope(user_id="erase-me", session_id="s1"))
    other_user = await _put(app, a, scope=Scope(user_id="keep-me", session_id="s1"))
    other_ws = await _put(app, b, scope=Scope(user_id="erase-me", session_id="s1"))
    async with app.db.tenant(a.key) as conn:
        assert await ToolResultBlobStore().delete_by_scope(conn, a, Scope(user_id="erase-me")) == 1
        with pytest.raises(ValueError, match="non-empty scope"):
            await ToolResultBlobStore().delete_by_scope(conn, a, Scope())
    assert not await _exists(app, mine.ref)
    assert await _exists(app, other_user.ref)
    assert await _exists(app, other_ws.ref)


async def test_delete_expired_removes_only_expired_blobs_of_every_workspace(
    app: App, tenant_factory: TenantFactory
) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    # The session server's own cleaner sweeps at the real time every 0.5 s, so the blobs
    # meant to stay must be alive then too: `base` an hour ago, `cutoff` 30 min from now
    # (a blob dated 1990 that should outlive `cutoff` was swept by it before the checks).
    base = datetime.now(UTC) - timedelta(minutes=60)
    cutoff = base + timedelta(minutes=90)
    # Distinct contents: identical ones would be one deduplicated blob.
    expired = [
        await _put(app, a, content="e1", now=base, retention=timedelta(minutes=30)),
        await _put(app, b, content="e2", now=base, retention=timedelta(minutes=60)),
        await _put(app, a, content="e3", now=base, retention=timedelta(minutes=90)),  # expires_at == cutoff
    ]
    alive = [
        await _put(app, a, content="a1", now=base, retention=timedelta(minutes=91)),
        await _put(app, b, content="a2", now=base, retention=timedelta(days=1)),
    ]
    deleted = await ToolResultBlobStore().delete_expired(app.db, now=cutoff, batch_size=2)  # 2 batches
    assert deleted >= 1  # e3 (expires_at == cutoff) is alive at the real time: only this call takes it
    for blob in expired:
        assert not await _exists(app, blob.ref)
    for blob in alive:
        assert await _exists(app, blob.ref)
    assert await ToolResultBlobStore().delete_expired(app.db, now=base) == 0
    with pytest.raises(ValueError, match="batch_size"):
        await ToolResultBlobStore().delete_expired(app.db, now=cutoff, batch_size=0)


async def test_blob_cleaner_runs_by_itself(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    long_ago = datetime.now(UTC) - timedelta(days=10)
    expired = await _put(app, ws, now=long_ago, retention=timedelta(hours=1))
    alive = await _put(app, ws)
    cleaner = BlobCleaner(ToolResultBlobStore(), app.db, interval_seconds=0.2)
    cleaner.start()
    cleaner.start()  # idempotent
    try:
        for _ in range(100):
            if not await _exists(app, expired.ref):
                break
            await asyncio.sleep(0.05)
        assert not await _exists(app, expired.ref)
        assert await _exists(app, alive.ref)
        runs = cleaner.stats.runs
        for _ in range(100):  # it keeps running every interval
            if cleaner.stats.runs > runs:
                break
            await asyncio.sleep(0.05)
        assert cleaner.stats.runs > runs
        assert cleaner.running
    finally:
        await cleaner.stop()
    assert not cleaner.running
    await cleaner.stop()  # idempotent


async def test_blob_cleaner_survives_database_errors(
    app: App, tenant_factory: TenantFactory, caplog: pytest.LogCaptureFixture
) -> None:
    ws = await tenant_factory()
    expired = await _put(app, ws, now=datetime.now(UTC) - timedelta(days=1), retention=timedelta(hours=1))
    failures = 2

    class FlakyStore(ToolResultBlobStore):
        async def delete_expired(self, db: Database, *, now: datetime, batch_size: int = 1000) -> int:
            nonlocal failures
            if failures:
                failures -= 1
                raise psycopg.OperationalError("connection lost")
            return await super().delete_expired(db, now=now, batch_size=batch_size)

    cleaner = BlobCleaner(FlakyStore(), app.db, interval_seconds=0.1)
    cleaner.start()
    try:
        # Wait for two failed passes and one successful one (the session server's own
        # cleaner may delete the blob first, so the blob's absence alone proves nothing).
        for _ in range(200):
            if cleaner.stats.failures == 2 and cleaner.stats.runs >= 1:
                break
            await asyncio.sleep(0.05)
    finally:
        await cleaner.stop()
    assert cleaner.stats.failures == 2
    assert cleaner.stats.runs >= 1  # it kept running after the errors
    assert not await _exists(app, expired.ref)
    assert "sweep of expired tool-result blobs failed" in caplog.text
    assert OUTPUT not in caplog.text  # counts, never content


async def test_deleting_a_workspace_deletes_its_blobs(app: App, tenant_factory: TenantFactory) -> None:
    doomed, kept = await tenant_factory(), await tenant_factory()
    gone = [await _put(app, doomed), await _put(app, doomed, content="another output")]
    stays = await _put(app, kept)
    await app.admin.delete_workspace(doomed.name)
    async with app.db.admin() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM tool_result_blobs WHERE workspace_key = %s", (doomed.key,))
        row = await cur.fetchone()
    assert row is not None
    assert row["n"] == 0
    for blob in gone:
        assert not await _exists(app, blob.ref)
    assert await _exists(app, stays.ref)


# --------------------------------------------------------------------------- dedup


async def test_identical_output_of_the_same_scope_is_stored_once(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    now = datetime.now(UTC)
    first = await _put(app, ws, now=now, retention=timedelta(hours=1))
    # The agent re-sends its uncut history a minute later, under another tool call id,
    # with a longer retention: the same blob, its expiry extended.
    later = now + timedelta(minutes=1)
    again = await _put(app, ws, now=later, retention=timedelta(days=2), tool_use_id="call-2")
    assert again.ref == first.ref
    assert again.expires_at == (later + timedelta(days=2)).replace(microsecond=0)
    assert (again.created_at, again.tool_use_id, again.content) == (first.created_at, "call-1", OUTPUT)
    assert await _get(app, ws, first.ref) == again  # the extension is stored
    # A shorter retention never shortens it.
    third = await _put(app, ws, now=later, retention=timedelta(seconds=5))
    assert (third.ref, third.expires_at) == (first.ref, again.expires_at)
    assert await _count(app, ws) == 1
    # Another content is another blob.
    assert (await _put(app, ws, content=OUTPUT + "!")).ref != first.ref
    assert await _count(app, ws) == 2


async def test_dedup_is_per_scope_and_per_workspace(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    refs = {
        (await _put(app, a, scope=scope)).ref
        for scope in (
            SCOPE,
            Scope(user_id="u2", agent_id="a1", session_id="s1"),
            Scope(user_id="u1", agent_id="a2", session_id="s1"),
            Scope(user_id="u1", agent_id="a1", session_id="s2"),
            Scope(),
        )
    }
    refs.add((await _put(app, b)).ref)
    assert len(refs) == 6
    # Erasing one user leaves the identical output of another user readable.
    async with app.db.tenant(a.key) as conn:
        assert await ToolResultBlobStore().delete_by_scope(conn, a, Scope(user_id="u2")) == 1
    assert await _count(app, a) == 4


async def test_an_expired_blob_is_not_reused(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    now = datetime.now(UTC)
    old = await _put(app, ws, now=now - timedelta(hours=2), retention=timedelta(hours=1))
    new = await _put(app, ws, now=now)
    assert new.ref != old.ref
    assert new.expires_at == (now + timedelta(days=3)).replace(microsecond=0)
    assert await _get(app, ws, new.ref) == new


async def test_concurrent_identical_puts_store_one_row(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    content = "parallel\n" * 50_000
    blobs = await asyncio.gather(*(_put(app, ws, content=content, tool_use_id=f"call-{i}") for i in range(10)))
    assert len({b.ref for b in blobs}) == 1
    assert await _count(app, ws) == 1
    assert all(b.content == content for b in blobs)


# --------------------------------------------------------------------------- verify


async def test_verify_accepts_only_a_real_cut_of_this_workspace(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    now = datetime.now(UTC)
    stored = await _put(app, a, now=now, retention=timedelta(hours=1))
    head = OUTPUT[:10]
    assert await _verify(app, a, stored.ref, head) == stored.expires_at
    assert await _verify(app, a, stored.ref, "") == stored.expires_at
    assert await _verify(app, a, stored.ref, OUTPUT) == stored.expires_at  # the whole output is a prefix too
    # A forged ref, another spelling, garbage.
    for ref in ("00000000-0000-0000-0000-000000000000", str(uuid.uuid4()), stored.ref.upper(), "nope"):
        assert await _verify(app, a, ref, head) is None, ref
    # Another workspace's ref (a sub-agent's cut output passed on).
    assert await _verify(app, b, stored.ref, head) is None
    # Expired.
    assert await _verify(app, a, stored.ref, head, now=stored.expires_at) is None
    # A head that is not the start of the blob.
    for wrong in ("x" + head, OUTPUT[1:10], OUTPUT + "more", head.upper()):
        assert await _verify(app, a, stored.ref, wrong) is None, wrong


# --------------------------------------------------------------------------- transcripts


def _context(
    msg_id: str, role: MessageRole, *blocks: TextBlock | ToolUseBlock | ToolResultBlock, name: str = ""
) -> ContextMessage:
    return ContextMessage(role=role, blocks=blocks, name=name, id=msg_id)


async def test_record_compacted_marks_known_messages_and_appends_the_rest(
    app: App, tenant_factory: TenantFactory
) -> None:
    ws = await tenant_factory()
    store = TranscriptStore()
    said = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    now = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    async with app.db.tenant(ws.key) as conn:  # as WriteConversation writes
        written = await store.append(
            conn,
            ws,
            SCOPE,
            [
                ConversationMessage("list the files", MessageRole.USER, id="m1", created_at=said),
                ConversationMessage("sure", MessageRole.ASSISTANT),
            ],
            now=now,
        )
    assert written == ["m1", "#2"]
    trunc = Truncation(str(uuid.uuid4()), 312_345, 4, 100, 2, 7, datetime(2026, 3, 4, 13, 0, tzinfo=UTC))
    compacted = [
        _context("m1", MessageRole.USER, TextBlock("list the files (as the agent holds it)")),
        _context("#2", MessageRole.ASSISTANT, TextBlock("sure")),
        _context("t1", MessageRole.ASSISTANT, ToolUseBlock("call-1", "shell", '{"cmd": "ls"}')),
        _context("", MessageRole.TOOL, ToolResultBlock("call-1", "a\nb", name="shell", truncation=trunc)),
        _context("#99", MessageRole.ASSISTANT, TextBlock("an id from another transcript"), name="bot"),
        _context("t1", MessageRole.ASSISTANT, ToolUseBlock("call-1", "shell", '{"cmd": "ls"}')),  # repeated
    ]
    async with app.db.tenant(ws.key) as conn:
        ids = await store.record_compacted(conn, ws, SCOPE, compacted, now=now)
    assert ids == ["m1", "#2", "t1", "#4", "#5", "t1"]
    async with app.db.tenant(ws.key) as conn:
        await store.append(conn, ws, SCOPE, [ConversationMessage("next", MessageRole.USER)], now=now)
        entries = await store.page(conn, ws, "s1", after_seq=0, limit=100)
    assert [(e.seq, e.message.id, e.compacted) for e in entries] == [
        (1, "m1", True),
        (2, "#2", True),
        (3, "t1", True),
        (4, "#4", True),
        (5, "#5", True),
        (6, "#6", False),
    ]
    # Known messages are marked, not rewritten: m1 keeps its WriteConversation text.
    first = entries[0].message
    assert (first.role, first.blocks, first.created_at) == (MessageRole.USER, (TextBlock("list the files"),), said)
    # Appended ones keep their blocks (truncation included), name, and get `now`.
    assert entries[2].message.blocks == compacted[2].blocks
    assert entries[3].message.blocks == compacted[3].blocks
    assert entries[3].message.role == MessageRole.TOOL
    assert entries[4].message.name == "bot"
    assert entries[4].message.created_at == now
    assert entries[5].message.blocks == (TextBlock("next"),)
    # content is the plain-text rendering (search and other readers of the column).
    async with app.db.tenant(ws.key) as conn:
        cur = await conn.execute(
            "SELECT content, blocks IS NULL AS plain FROM transcript_messages WHERE workspace_key = %s"
            " AND session_id = 's1' ORDER BY seq",
            (ws.key,),
        )
        rows = await cur.fetchall()
    assert rows[3]["content"] == compacted[3].text()
    assert [r["plain"] for r in rows] == [True, True, False, False, False, True]


async def test_record_compacted_twice_is_stable(app: App, tenant_factory: TenantFactory) -> None:
    ws = await tenant_factory()
    store = TranscriptStore()
    now = datetime.now(UTC)
    messages = [_context("x1", MessageRole.USER, TextBlock("hi")), _context("", MessageRole.ASSISTANT, TextBlock("yo"))]
    async with app.db.tenant(ws.key) as conn:
        first = await store.record_compacted(conn, ws, SCOPE, messages, now=now)
    again = [messages[0], _context(first[1], MessageRole.ASSISTANT, TextBlock("yo"))]  # ids as GetTranscript gave
    async with app.db.tenant(ws.key) as conn:
        second = await store.record_compacted(conn, ws, SCOPE, again, now=now)
        entries = await store.page(conn, ws, "s1", after_seq=0, limit=10)
    assert first == second == ["x1", "#2"]
    assert len(entries) == 2
    with pytest.raises(ValueError, match="session_id"):
        async with app.db.tenant(ws.key) as conn:
            await store.record_compacted(conn, ws, Scope(user_id="u"), messages, now=now)


async def test_page_is_ordered_bounded_and_per_session(app: App, tenant_factory: TenantFactory) -> None:
    a, b = await tenant_factory(), await tenant_factory()
    store = TranscriptStore()
    now = datetime.now(UTC)
    async with app.db.tenant(a.key) as conn:
        await store.append(
            conn, a, SCOPE, [ConversationMessage(f"m{i}", MessageRole.USER) for i in range(1, 8)], now=now
        )
        await store.append(
            conn, a, Scope(session_id="other"), [ConversationMessage("elsewhere", MessageRole.USER)], now=now
        )
    async with app.db.tenant(b.key) as conn:
        await store.append(conn, b, SCOPE, [ConversationMessage("b's", MessageRole.USER)], now=now)
    async with app.db.tenant(a.key) as conn:
        page1 = await store.page(conn, a, "s1", after_seq=0, limit=3)
        page3 = await store.page(conn, a, "s1", after_seq=6, limit=3)
        missing = await store.page(conn, a, "nope", after_seq=0, limit=3)
    assert [e.seq for e in page1] == [1, 2, 3]
    assert [e.message.text() for e in page1] == ["m1", "m2", "m3"]
    assert [e.seq for e in page3] == [7]
    assert missing == []


# --------------------------------------------------------------------------- migration


@pytest.fixture
async def empty_database(pg_dsn: str) -> AsyncIterator[str]:
    """DSN of a new, empty database on the test server."""
    name = f"mig_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        try:
            await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test DSN's user may not create databases")
    yield make_conninfo(pg_dsn, dbname=name)
    if os.environ.get("MEMPLANE_TEST_DSN"):  # the embedded server is thrown away whole
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


async def test_migration_0003_upgrades_a_database_holding_data(empty_database: str) -> None:
    earlier = [(v, n, t) for v, n, t in _migrations() if v < 3]
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, name, text in earlier:
            await conn.execute(text.encode())
            await conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        cur = await conn.execute(
            "INSERT INTO workspaces (name, embedding_model, embedding_dimensions) VALUES ('old', 'm', 3) RETURNING key"
        )
        row = await cur.fetchone()
        assert row is not None
        key = row[0]
        await conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF transcript_messages FOR VALUES IN ({})").format(
                sql.Identifier(f"transcript_messages_w{key}"), sql.Literal(key)
            )
        )
        await conn.execute(
            "INSERT INTO transcript_messages (workspace_key, session_id, seq, message_id, role, content, created_at)"
            " VALUES (%s, 's', 1, 'm1', 'user', 'hello', now())",
            (key,),
        )
    applied = await apply_migrations(empty_database)
    assert applied[:2] == ["0003_compaction.sql", "0004_blob_digest.sql"]  # then any later ones
    async with await psycopg.AsyncConnection.connect(empty_database) as conn:
        cur = await conn.execute(
            "SELECT w.token_encoding, t.blocks FROM workspaces w JOIN transcript_messages t ON t.workspace_key = w.key"
        )
        assert await cur.fetchall() == [("o200k_base", None)]
        # The existing partition got the column, and takes structured rows.
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} (workspace_key, session_id, seq, message_id, role, content, created_at, blocks)"
                " VALUES (%s, 's', 2, 'm2', 'tool', 'x', now(), '[]')"
            ).format(sql.Identifier(f"transcript_messages_w{key}")),
            (key,),
        )
        cur = await conn.execute("SELECT relrowsecurity FROM pg_class WHERE relname = 'tool_result_blobs'")
        assert await cur.fetchall() == [(True,)]
    assert await apply_migrations(empty_database) == []


async def test_migration_0004_backfills_the_digest_of_existing_blobs(empty_database: str) -> None:
    earlier = [(v, n, t) for v, n, t in _migrations() if v < 4]
    contents = ["", "plain", OUTPUT, "é中😀\r\n" * 1000]
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, name, text in earlier:
            await conn.execute(text.encode())
            await conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        cur = await conn.execute(
            "INSERT INTO workspaces (name, embedding_model, embedding_dimensions) VALUES ('old', 'm', 3) RETURNING key"
        )
        row = await cur.fetchone()
        assert row is not None
        key = row[0]
        for content in contents:
            await conn.execute(
                "INSERT INTO tool_result_blobs (workspace_key, id, content, byte_size, line_count, expires_at)"
                " VALUES (%s, %s, %s, 0, 0, now() + interval '1 day')",
                (key, uuid.uuid4(), content),
            )
    assert (await apply_migrations(empty_database))[0] == "0004_blob_digest.sql"
    async with await psycopg.AsyncConnection.connect(empty_database) as conn:
        cur = await conn.execute("SELECT content, content_sha256 FROM tool_result_blobs")
        rows = await cur.fetchall()
        # Backfilled as put() computes it (Python's sha256 of the UTF-8 bytes).
        assert sorted((c, bytes(d)) for c, d in rows) == sorted(
            (c, hashlib.sha256(c.encode("utf-8")).digest()) for c in contents
        )
        cur = await conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'tool_result_blobs_digest_idx'")
        assert [r[0] for r in await cur.fetchall()] == [
            "CREATE INDEX tool_result_blobs_digest_idx ON public.tool_result_blobs"
            " USING btree (workspace_key, content_sha256)"
        ]
        # Tenants may extend the expiry, and nothing else.
        cur = await conn.execute(
            "SELECT has_column_privilege('memplane_tenant', 'tool_result_blobs', 'expires_at', 'UPDATE'),"
            " has_column_privilege('memplane_tenant', 'tool_result_blobs', 'content', 'UPDATE')"
        )
        assert await cur.fetchall() == [(True, False)]
    assert await apply_migrations(empty_database) == []
