"""Bulk seeding of one workspace's memories for benchmarks at 1M rows (not a product path).

AddMemories seeds ~400 rows/s here once a workspace holds 100k (each row an HNSW insert
into a growing graph), so a million would take over an hour. This loads the rows the way
PostgreSQL loads a partition in bulk instead, straight into memplane's own schema:

  1. the workspace's (empty) `memories` partition is DETACHed and its indexes dropped;
  2. the rows are COPYed (binary) into an unlogged staging table and INSERTed into the
     partition with the same derived columns AddMemories writes (`lexical` =
     to_tsvector('english', segment(index_text)), `lexical_length`, `content_bytes`);
  3. `lexeme_df` (BM25 document frequencies) and `workspace_stats` are counted from the
     rows — the numbers AddMemories would have kept on write;
  4. the HNSW index is rebuilt from its own definition (m, ef_construction as the
     workspace created it), and ATTACH PARTITION builds every index the parent declares.

What differs from rows written through AddMemories, and is said wherever it is used: no
history events (`memory_events`), no idempotency records, one `lexeme_df` shard. Search
reads none of those, so the search measured over these rows is the product's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import psycopg
from _harness import Stack, log
from pgvector.psycopg import register_vector_async
from psycopg import sql

from memplane.domain.models import index_text
from memplane.server.storage.memories import TS_CONFIG
from memplane.text.segment import segment

# One seeded row: (user_id, description, content, vector).
Row = tuple[str, str, str, np.ndarray]

STAGE = "bench_bulk_stage"


async def _indexes(conn: psycopg.AsyncConnection[Any], table: str) -> list[tuple[str, str, str | None]]:
    """(index name, definition, owning constraint or None) of *table*'s indexes."""
    cur = await conn.execute(
        "SELECT i.relname, pg_get_indexdef(i.oid), c.conname FROM pg_index x"
        " JOIN pg_class i ON i.oid = x.indexrelid LEFT JOIN pg_constraint c ON c.conindid = i.oid"
        " WHERE x.indrelid = %s::regclass",
        (table,),
    )
    return [(r[0], r[1], r[2]) for r in await cur.fetchall()]


async def bulk_seed(stack: Stack, n: int, rows: Callable[[int, int], Iterable[Row]], *, chunk: int = 20_000) -> float:
    """Load rows [0, n) (`rows(start, stop)` yields them lazily) into the bench workspace;
    seconds taken, indexes and statistics included."""
    key = stack.workspace.key
    part = f"memories_w{key}"
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(stack.app.db.dsn, autocommit=True) as conn:
        await register_vector_async(conn)
        await conn.execute("SET maintenance_work_mem = '6GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 1")
        await conn.execute(sql.SQL("ALTER TABLE memories DETACH PARTITION {}").format(sql.Identifier(part)))
        indexes = await _indexes(conn, part)
        local = [d for name, d, _ in indexes if name == f"{part}_hnsw"]
        for name, _, constraint in indexes:
            if constraint:
                await conn.execute(
                    sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                        sql.Identifier(part), sql.Identifier(constraint)
                    )
                )
            else:
                await conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        await conn.execute(
            f"CREATE UNLOGGED TABLE {STAGE} (id uuid, user_id text, description text, content text,"
            f" lexical_text text, content_bytes integer, embedding vector({stack.workspace.embedding_dimensions}))"
        )
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            async with (
                conn.cursor() as cur,
                cur.copy(f"COPY {STAGE} FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(["uuid", "text", "text", "text", "text", "int4", "vector"])
                for user_id, description, content, vector in rows(start, stop):
                    text = index_text("", description, content)
                    await copy.write_row(
                        (uuid.uuid4(), user_id, description, content, segment(text), len(text.encode()), vector)
                    )
            if (stop // chunk) % 10 == 0:
                log(f"bulk seeding: {stop:,}/{n:,} staged ({stop / (time.perf_counter() - started):,.0f}/s)")
        await conn.execute(
            sql.SQL(
                "INSERT INTO {part} (workspace_key, id, user_id, type, description, content, embedding, lexical,"
                " lexical_length, content_bytes, valid_from, created_at, updated_at)"
                " SELECT {key}, s.id, s.user_id, 'episodic', s.description, s.content, s.embedding, t.v,"
                " (SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest(t.v) u), s.content_bytes,"
                " now(), now(), now()"
                " FROM {stage} s CROSS JOIN LATERAL (SELECT to_tsvector({cfg}, s.lexical_text) AS v) t"
            ).format(
                part=sql.Identifier(part), key=sql.Literal(key), stage=sql.Identifier(STAGE), cfg=sql.Literal(TS_CONFIG)
            )
        )
        await conn.execute(f"DROP TABLE {STAGE}")
        log(f"bulk seeding: {n:,} rows in the partition after {time.perf_counter() - started:.0f} s; counting")
        await conn.execute(
            sql.SQL(
                "INSERT INTO lexeme_df (workspace_key, lexeme, shard, df)"
                " SELECT {key}, u.lexeme, 0, count(*) FROM {part} m CROSS JOIN LATERAL unnest(m.lexical) u"
                " GROUP BY u.lexeme"
            ).format(part=sql.Identifier(part), key=sql.Literal(key))
        )
        await conn.execute(
            sql.SQL(
                "UPDATE workspace_counters s SET memory_count = CASE s.shard WHEN 0 THEN d.n ELSE 0 END,"
                " content_bytes = CASE s.shard WHEN 0 THEN d.bytes ELSE 0 END,"
                " lexical_length_sum = CASE s.shard WHEN 0 THEN d.len ELSE 0 END"
                " FROM (SELECT count(*) AS n, coalesce(sum(content_bytes), 0) AS bytes,"
                " coalesce(sum(lexical_length), 0) AS len FROM {part}) d WHERE s.workspace_key = {key}"
            ).format(part=sql.Identifier(part), key=sql.Literal(key))
        )
        for definition in local:
            built = time.perf_counter()
            await conn.execute(definition)
            log(f"bulk seeding: HNSW index built in {time.perf_counter() - built:.0f} s")
        built = time.perf_counter()
        await conn.execute(
            sql.SQL("ALTER TABLE memories ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.Identifier(part), sql.Literal(key)
            )
        )
        log(f"bulk seeding: attached, the parent's indexes built in {time.perf_counter() - built:.0f} s")
    return time.perf_counter() - started
