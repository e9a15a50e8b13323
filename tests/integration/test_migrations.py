"""Migrations are versioned, applied once under an advisory lock, and idempotent."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from memplane.errors import FailedPreconditionError
from memplane.server.app import build_app
from memplane.server.settings import AuthSettings, DatabaseSettings, Settings
from memplane.server.storage.migrate import _migrations, apply_migrations, pending_migrations


@pytest.fixture
async def empty_database(pg_dsn: str) -> AsyncIterator[str]:
    """DSN of a new, empty database on the test server (dropped afterwards)."""
    name = f"mig_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        try:
            await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test DSN's user may not create databases")
    yield make_conninfo(pg_dsn, dbname=name)
    # On a shared server, clean up. The embedded server is thrown away with the session's
    # temporary directory, and there DROP DATABASE took ~10 s after the e2e tests' writes.
    if os.environ.get("MEMPLANE_TEST_DSN"):
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


async def test_two_concurrent_runs_apply_each_migration_once(empty_database: str) -> None:
    expected = [name for _, name, _ in _migrations()]
    assert expected, "no migration files were packaged"
    first, second = await asyncio.gather(apply_migrations(empty_database), apply_migrations(empty_database))
    assert sorted([first, second], key=len) == [[], expected]
    async with await psycopg.AsyncConnection.connect(empty_database) as conn:
        cur = await conn.execute("SELECT name FROM schema_migrations ORDER BY version")
        assert [r[0] for r in await cur.fetchall()] == expected
        cur = await conn.execute(
            "SELECT count(*) FROM pg_class WHERE relname = ANY(%s) AND relkind IN ('r', 'p')",
            (["workspaces", "memories", "memory_events", "transcript_messages", "idempotency_keys", "api_keys"],),
        )
        row = await cur.fetchone()
        assert row is not None
        assert row[0] == 6
    # A third run, later, finds nothing to do.
    assert await apply_migrations(empty_database) == []


async def test_rerunning_on_the_session_database_is_a_no_op(pg_dsn: str) -> None:
    results = await asyncio.gather(apply_migrations(pg_dsn), apply_migrations(pg_dsn))
    assert results == [[], []]
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute("SELECT count(*), count(DISTINCT version) FROM schema_migrations")
        row = await cur.fetchone()
        assert row is not None
        assert row[0] == row[1] == len(_migrations())


async def test_a_server_that_does_not_migrate_refuses_a_database_lacking_migrations(
    empty_database: str, tmp_path: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database=DatabaseSettings(dsn=empty_database, migrate_on_start=False),
        auth=AuthSettings(admin_key=SecretStr(f"mp_mig_{secrets.token_hex(16)}"), bootstrap_default_workspace=False),
    )
    expected = [name for _, name, _ in _migrations()]
    assert await pending_migrations(empty_database) == expected
    with pytest.raises(FailedPreconditionError, match="memplane migrate") as caught:
        await build_app(settings)
    assert expected[-1] in str(caught.value)
    await apply_migrations(empty_database)
    assert await pending_migrations(empty_database) == []
    app = await build_app(settings)  # migrated by the Job: it starts
    await app.close()
    # A configured admin key and no default workspace: nothing written to disk.
    assert not (tmp_path / "data").exists()


async def test_0008_renumbers_existing_events_per_workspace_keeping_their_order(empty_database: str) -> None:
    await apply_migrations(empty_database, up_to=7)
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        keys = {}
        for name in ("a", "b", "quiet"):
            cur = await conn.execute(
                "INSERT INTO workspaces (name, embedding_model, embedding_dimensions)"
                " VALUES (%s, 'm', 3) RETURNING key",
                (name,),
            )
            row = await cur.fetchone()
            assert row is not None
            keys[name] = row[0]
            await conn.execute("INSERT INTO workspace_stats (workspace_key) VALUES (%s)", (row[0],))
            await conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF memory_events FOR VALUES IN ({})").format(
                    sql.Identifier(f"memory_events_w{row[0]}"), sql.Literal(row[0])
                )
            )
        # Interleaved as two tenants' writes were, on the one shared sequence.
        for name, actor in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3"), ("b", "b2")]:
            await conn.execute(
                "INSERT INTO memory_events (workspace_key, memory_id, kind, actor)"
                " VALUES (%s, gen_random_uuid(), 'ADD', %s)",
                (keys[name], actor),
            )
    assert await apply_migrations(empty_database, up_to=8) == ["0008_tenant_isolation.sql"]
    async with await psycopg.AsyncConnection.connect(empty_database) as conn:
        for name, expected in [("a", [(1, "a1"), (2, "a2"), (3, "a3")]), ("b", [(1, "b1"), (2, "b2")]), ("quiet", [])]:
            cur = await conn.execute(
                "SELECT id, actor FROM memory_events WHERE workspace_key = %s ORDER BY id", (keys[name],)
            )
            assert await cur.fetchall() == expected, name
            cur = await conn.execute(
                "SELECT last_event_id FROM workspace_stats WHERE workspace_key = %s", (keys[name],)
            )
            assert await cur.fetchone() == (len(expected),), name
        cur = await conn.execute("SELECT to_regclass('memory_events_id_seq')")
        assert await cur.fetchone() == (None,)  # nothing can take an id from a shared sequence any more


async def test_0009_generates_a_read_token_key_the_tenant_role_cannot_read(empty_database: str) -> None:
    await apply_migrations(empty_database)
    async with await psycopg.AsyncConnection.connect(empty_database) as conn:
        cur = await conn.execute("SELECT secret FROM server_secrets WHERE name = 'read_token'")
        row = await cur.fetchone()
        assert row is not None
        assert len(bytes(row[0])) == 32
        await conn.execute("SET ROLE memplane_tenant")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("SELECT secret FROM server_secrets")


async def test_0014_moves_counters_to_shards_and_event_ids_to_a_sequence_per_workspace(empty_database: str) -> None:
    await apply_migrations(empty_database, up_to=13)
    stats = {"a": (3, 120, 17, 5), "quiet": (0, 0, 0, 0)}  # memory_count, content_bytes, lexical_length_sum, events
    keys = {}
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        for name, (count, size, length, events) in stats.items():
            cur = await conn.execute(
                "INSERT INTO workspaces (name, embedding_model, embedding_dimensions)"
                " VALUES (%s, 'm', 3) RETURNING key",
                (name,),
            )
            row = await cur.fetchone()
            assert row is not None
            keys[name] = row[0]
            await conn.execute(
                "INSERT INTO workspace_stats (workspace_key, memory_count, content_bytes, lexical_length_sum,"
                " last_event_id) VALUES (%s, %s, %s, %s, %s)",
                (row[0], count, size, length, events),
            )
            await conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF memory_events FOR VALUES IN ({})").format(
                    sql.Identifier(f"memory_events_w{row[0]}"), sql.Literal(row[0])
                )
            )
    assert await apply_migrations(empty_database, up_to=14) == ["0014_unlocked_write_counters.sql"]
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        for name, expected in stats.items():
            cur = await conn.execute(
                "SELECT memory_count, content_bytes, lexical_length_sum, last_event_id FROM workspace_stats"
                " WHERE workspace_key = %s",
                (keys[name],),
            )
            assert await cur.fetchone() == expected, name  # the view sums to the old row
            cur = await conn.execute("SELECT count(*) FROM workspace_counters WHERE workspace_key = %s", (keys[name],))
            assert await cur.fetchone() == (8,), name
            cur = await conn.execute("SELECT memplane_event_ids(%s, 2)", (keys[name],))
            assert await cur.fetchone() == ([expected[3] + 1, expected[3] + 2],), name  # ids go on from the count


async def test_0015_indexes_each_existing_partitions_memories_by_their_first_source_message(
    empty_database: str,
) -> None:
    """Context turns look a turn's memory up by (workspace, source session, first source
    message id): the index reaches a workspace partition made before the migration, and
    that lookup can use it."""
    await apply_migrations(empty_database, up_to=14)
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        cur = await conn.execute(
            "INSERT INTO workspaces (name, embedding_model, embedding_dimensions) VALUES ('a', 'm', 3) RETURNING key"
        )
        row = await cur.fetchone()
        assert row is not None
        key = row[0]
        partition = f"memories_w{key}"
        await conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF memories FOR VALUES IN ({})").format(
                sql.Identifier(partition), sql.Literal(key)
            )
        )
    assert await apply_migrations(empty_database, up_to=15) == ["0015_turn_memory_lookup.sql"]
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND h.inhparent = 'memories_source_turn_idx'::regclass",
            (partition,),
        )
        (child,) = [r[0] for r in await cur.fetchall()]
        await conn.execute("SET enable_seqscan = off")
        cur = await conn.execute(
            "EXPLAIN SELECT id FROM memories WHERE workspace_key = %s AND source_session_id = %s"
            " AND source_message_ids[1] = %s",
            (key, "s", "D1:1"),
        )
        plan = "\n".join(r[0] for r in await cur.fetchall())
        assert f"Index Scan using {child}" in plan or f"Bitmap Index Scan on {child}" in plan, plan


async def test_0017_counts_the_stored_tool_outputs_of_existing_workspaces(empty_database: str) -> None:
    """The blob bytes of workspaces made before the migration are backfilled, and from
    then on every insert and delete of a blob moves them (as the database owner here:
    no tenant, no quota)."""
    await apply_migrations(empty_database, up_to=16)
    insert_blob = (
        "INSERT INTO tool_result_blobs (workspace_key, id, content, content_sha256, byte_size, line_count, expires_at)"
        " VALUES (%s, gen_random_uuid(), %s, sha256(convert_to(%s, 'UTF8')), %s, 1, now() + interval '1 day')"
    )
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        keys = []
        for name in ("a", "b", "c"):
            cur = await conn.execute(
                "INSERT INTO workspaces (name, embedding_model, embedding_dimensions)"
                " VALUES (%s, 'm', 3) RETURNING key",
                (name,),
            )
            row = await cur.fetchone()
            assert row is not None
            keys.append(row[0])
        for key, sizes in zip(keys, ([10, 20], [5], []), strict=True):
            for size in sizes:
                await conn.execute(insert_blob, (key, "x" * size, "x" * size, size))
    assert await apply_migrations(empty_database, up_to=17) == ["0017_tool_result_bytes_quota.sql"]
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:

        async def blob_bytes() -> list[int]:
            cur = await conn.execute(
                "SELECT coalesce((SELECT bytes FROM workspace_blob_bytes WHERE workspace_key = k), 0)"
                " FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(k, i) ORDER BY i",
                (keys,),
            )
            return [r[0] for r in await cur.fetchall()]

        assert await blob_bytes() == [30, 5, 0]
        await conn.execute(insert_blob, (keys[2], "y" * 7, "y" * 7, 7))
        await conn.execute("DELETE FROM tool_result_blobs WHERE workspace_key = %s AND byte_size = 10", (keys[0],))
        assert await blob_bytes() == [20, 5, 7]


async def test_0020_rebuilds_an_existing_hnsw_index_as_partial_with_the_rows_already_in_its_graph(
    empty_database: str,
) -> None:
    """A workspace written before migration 0020 (its HNSW index over every row, as the
    release before created it): after it the index is partial (WHERE vector_indexed), every
    existing row is marked indexed and a graph walk through the rebuilt index finds the
    nearest, while a row written afterwards without the flag waits in the backlog."""
    await apply_migrations(empty_database, up_to=19)
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        cur = await conn.execute(
            "INSERT INTO workspaces (name, embedding_model, embedding_dimensions) VALUES ('a', 'm', 3) RETURNING key"
        )
        row = await cur.fetchone()
        assert row is not None
        key = row[0]
        partition = sql.Identifier(f"memories_w{key}")
        await conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF memories FOR VALUES IN ({})").format(partition, sql.Literal(key))
        )
        await conn.execute(
            sql.SQL(
                "CREATE INDEX {} ON {} USING hnsw ((embedding::vector(3)) vector_cosine_ops)"
                " WITH (m = 16, ef_construction = 64)"
            ).format(sql.Identifier(f"memories_w{key}_hnsw"), partition)
        )
        insert = (
            "INSERT INTO memories (workspace_key, id, type, content, embedding, lexical, lexical_length, content_bytes,"
            " valid_from, created_at, updated_at)"
            " SELECT %s, gen_random_uuid(), 'user', 'note ' || i,"
            " ARRAY[cos(i * 0.1), sin(i * 0.1), (i %% 7) / 7.0]::vector, to_tsvector('note'), 1, 5, now(), now(), now()"
            " FROM generate_series(%s::int, %s::int) i"
        )
        await conn.execute(insert, (key, 1, 2000))
        await conn.execute(sql.SQL("ANALYZE {}").format(partition))
    assert await apply_migrations(empty_database, up_to=21) == [
        "0020_deferred_vector_index.sql",
        "0021_partial_hnsw.sql",
    ]
    async with await psycopg.AsyncConnection.connect(empty_database, autocommit=True) as conn:
        cur = await conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"memories_w{key}_hnsw",))
        definition = (await cur.fetchone() or ("",))[0]
        assert definition.endswith("WHERE vector_indexed"), definition
        cur = await conn.execute("SELECT vector_indexed, count(*) FROM memories GROUP BY 1")
        assert await cur.fetchall() == [(True, 2000)]

        walk = (
            "SELECT content FROM memories WHERE workspace_key = %s AND vector_indexed"
            " ORDER BY embedding::vector(3) <=> '[1, 0.2, 0.5]'::vector(3) LIMIT 5"
        )
        exact = (  # + 0 hides the order from the index: every row, sorted
            "SELECT content FROM memories WHERE workspace_key = %s"
            " ORDER BY (embedding::vector(3) <=> '[1, 0.2, 0.5]'::vector(3)) + 0 LIMIT 5"
        )
        cur = await conn.execute(exact, (key,))
        expected = [r[0] for r in await cur.fetchall()]
        cur = await conn.execute("EXPLAIN " + walk, (key,))
        plan = "\n".join(r[0] for r in await cur.fetchall())
        assert f"Index Scan using memories_w{key}_hnsw" in plan, plan
        cur = await conn.execute(walk, (key,))
        assert [r[0] for r in await cur.fetchall()] == expected  # the graph holds every row

        await conn.execute(insert, (key, 2001, 2001))  # as a new write stores it: no flag given
        cur = await conn.execute(
            "SELECT count(*) FROM memories WHERE workspace_key = %s AND NOT vector_indexed", (key,)
        )
        assert await cur.fetchone() == (1,)
