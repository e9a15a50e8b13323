"""Migration 0013 backfills the duplicate key of memories stored before it: the oldest
current memory of each normalised text and scope holds it, later copies, closed memories
and WriteConversation's episodic turns do not; then the unique index holds. It also
starts the failure history of jobs that failed before it."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from memplane.server.storage.migrate import apply_migrations

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def old_database(pg_dsn: str) -> AsyncIterator[str]:
    """DSN of a new database migrated up to 0012."""
    name = f"mig13_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        try:
            await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test DSN's user may not create databases")
    dsn = make_conninfo(pg_dsn, dbname=name)
    await apply_migrations(dsn, up_to=12)
    yield dsn
    if os.environ.get("MEMPLANE_TEST_DSN"):  # a shared server: clean up (the embedded one is thrown away)
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


async def test_0013_backfills_the_oldest_copy_of_each_text(old_database: str) -> None:
    async with await psycopg.AsyncConnection.connect(old_database, autocommit=True) as conn:
        cur = await conn.execute(
            "INSERT INTO workspaces (name, embedding_model, embedding_dimensions) VALUES ('w', 'm', 3) RETURNING key"
        )
        row = await cur.fetchone()
        assert row is not None
        ws = row[0]
        await conn.execute("INSERT INTO workspace_stats (workspace_key) VALUES (%s)", (ws,))
        await conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF memories FOR VALUES IN ({})").format(
                sql.Identifier(f"memories_w{ws}"), sql.Literal(ws)
            )
        )
        rows = {  # name: (user_id, session_id, type, content, metadata, minutes after T0, closed)
            "first": ("u1", "", "user", "I like green tea", {}, 0, False),
            "copy": ("u1", "", "user", "  i LIKE green\u3000tea ", {}, 5, False),
            "other_user": ("u2", "", "user", "I like green tea", {}, 6, False),
            "fullwidth": ("u1", "", "user", "ＡＢＣ株式会社", {}, 7, False),
            "turn": ("u1", "s1", "episodic", "ok", {"message_id": "m1"}, 8, False),
            "closed": ("u1", "", "user", "Lives in Whitefield", {}, 9, True),
        }
        ids = {}
        for name, (user, session, kind, content, metadata, minutes, closed) in rows.items():
            at = T0 + timedelta(minutes=minutes)
            cur = await conn.execute(
                "INSERT INTO memories (workspace_key, id, user_id, session_id, type, content, metadata, embedding,"
                " lexical, lexical_length, content_bytes, valid_from, valid_to, created_at, updated_at)"
                " VALUES (%s, gen_random_uuid(), %s, %s, %s, %s, %s, '[1,0,0]', to_tsvector('english', %s), 1,"
                " %s, %s, %s, %s, %s) RETURNING id",
                (
                    ws,
                    user,
                    session,
                    kind,
                    content,
                    Jsonb(metadata),
                    content,
                    len(content.encode()),
                    at,
                    at + timedelta(days=1) if closed else None,
                    at,
                    at,
                ),
            )
            row = await cur.fetchone()
            assert row is not None
            ids[name] = row[0]
    assert await apply_migrations(old_database, up_to=13) == ["0013_duplicate_content.sql"]
    async with await psycopg.AsyncConnection.connect(old_database, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT id, content_key, memplane_content_key(content) FROM memories WHERE workspace_key = %s", (ws,)
        )
        keys = {r[0]: (r[1], r[2]) for r in await cur.fetchall()}
        held = {name for name, i in ids.items() if keys[i][0] is not None}
        assert held == {"first", "other_user", "fullwidth"}
        assert all(keys[ids[n]][0] == keys[ids[n]][1] for n in held)
        assert keys[ids["copy"]][1] == keys[ids["first"]][0]  # the copy is the same text, normalised
        # The index now refuses a second current holder of a key in one scope.
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                "UPDATE memories SET content_key = memplane_content_key(content) WHERE workspace_key = %s AND id = %s",
                (ws, ids["copy"]),
            )


async def test_0013_starts_each_failed_jobs_history_with_its_last_error(old_database: str) -> None:
    async with await psycopg.AsyncConnection.connect(old_database, autocommit=True) as conn:
        cur = await conn.execute(
            "INSERT INTO workspaces (name, embedding_model, embedding_dimensions) VALUES ('j', 'm', 3) RETURNING key"
        )
        row = await cur.fetchone()
        assert row is not None
        ws = row[0]
        await conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF extraction_jobs FOR VALUES IN ({})").format(
                sql.Identifier(f"extraction_jobs_w{ws}"), sql.Literal(ws)
            )
        )
        for key, status, attempts, error in [("a", "failed", 3, "LLM: timeout after 2.0 s"), ("b", "done", 1, "")]:
            await conn.execute(
                "INSERT INTO extraction_jobs (workspace_key, id, dedupe_key, status, session_id, message_ids, actor,"
                " attempts, error) VALUES (%s, gen_random_uuid(), %s, %s, 's', '{m1}', 'test', %s, %s)",
                (ws, key, status, attempts, error),
            )
    await apply_migrations(old_database)
    async with await psycopg.AsyncConnection.connect(old_database, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT dedupe_key, failed_attempts FROM extraction_jobs WHERE workspace_key = %s ORDER BY dedupe_key",
            (ws,),
        )
        [(_, failed), (_, done)] = await cur.fetchall()
        assert [(f["attempt"], f["error"]) for f in failed] == [(3, "LLM: timeout after 2.0 s")]
        assert done == []
        # The history keeps the latest 10 failures, each cut to 500 characters.
        cur = await conn.execute(
            "SELECT memplane_job_failure(%s, 12, repeat('x', 600))",
            (Jsonb([{"attempt": n, "error": "e", "time": "2026-01-01T00:00:00+00:00"} for n in range(1, 12)]),),
        )
        row = await cur.fetchone()
        assert row is not None
        assert [f["attempt"] for f in row[0]] == list(range(3, 13))
        assert len(row[0][-1]["error"]) == 500
