"""What each part of a one-memory write costs PostgreSQL: `memplane_insert_memories` as
stored, and copies of it with parts cut out, beside the raw single-row INSERT of
bench/ingest_sql.py, on one embedded PostgreSQL.

What it measures (per call, one memory, in alternating rounds)
  - the CPU time of the PostgreSQL backend that ran it (psutil on the connection's
    backend: the function's own work, commit and WAL flush included; not the client's),
  - the WAL it wrote (`pg_current_wal_insert_lsn()` before and after each round).
  Variants (created in this bench's scratch database only, from `pg_get_functiondef` of
  the stored function, so they follow the current migration; a cut that no longer finds
  its CTE fails loudly):
    full            the function as stored, with a request record and deduplication,
                    the row left out of the HNSW graph (what AddMemories sends for a
                    small write since migration 0020; the vector indexer's later UPDATE,
                    which enters it into the graph, is not counted)
    no lexeme_df    without the BM25 document-frequency upserts (CTE df)
    no events       without the ADD events and their 'after' snapshots (CTE ev)
    no df, no ev    both cut
    bare            both cut, no quota check, no request record, no deduplication: the
                    row, its counters shard and entering the workspace
    plain INSERT    one INSERT of the same row straight into `memories` as the owner (no
                    function, no row-level security, no bookkeeping)
    raw INSERT      bench/ingest_sql.py's INSERT into a plain table (id, user_id, content,
                    metadata, vector, generated tsvector, created_at; HNSW, GIN, btree)
  Then the vector indexer's UPDATE (`memplane.server.storage.vector_index`, the statement
  that later puts a deferred memory into its workspace's HNSW graph), over the rows the
  variants left, in its batches: per memory, with the graph insert and without it (the
  HNSW index dropped), so the graph insert's share of the UPDATE shows (issue 31;
  decision 0006's "graph of its own" would save the rest). The server's own indexer is held
  off for the run (its scan an hour away), so it does not index these rows itself.
  --no-hnsw drops the HNSW indexes of both tables first. The function's variants leave
  their rows out of the graph either way (so does the plain INSERT: its rows have
  vector_indexed false); the raw INSERT pays its graph insert unless --no-hnsw, and that
  grows with its table, so with --no-hnsw every part compares on a flat base.

Data: LoCoMo turns as texts with random unit vectors (the vectors' values do not change
  what a part costs; with --no-hnsw they are not indexed at all).

    python bench/ingest_parts.py [--calls 1600] [--rounds 4] [--no-hnsw] [--indexed 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped]
import psycopg
from _harness import bench_server, closing_banner, common_args, environment_banner, locomo_turns, log, print_table
from ingest_sql import INSERT, create_raw_table
from pgvector.psycopg import register_vector_async
from psycopg.rows import dict_row

from memplane.domain.models import NewMemory, Scope, Workspace
from memplane.server.settings import VectorIndexSettings
from memplane.server.storage.binary_arrays import register_array_dumpers
from memplane.server.storage.inserts import (
    INSERT_FUNCTION,
    PreparedMemory,
    RequestRecord,
    insert_params,
    insert_statement,
    new_memories,
)
from memplane.server.storage.vector_index import BATCH_SIZE, INDEX_BATCH

_PLAIN = (
    "INSERT INTO memories (workspace_key, id, user_id, agent_id, session_id, type, name, description, content,"
    " metadata, embedding, lexical, lexical_length, content_bytes, valid_from, created_at, updated_at, version)"
    " VALUES (%s, %s, %s, '', '', 'user', '', '', %s, '{}', %s, to_tsvector('english', %s), 0, %s, now(), now(),"
    " now(), 1)"
)
_QUOTA_CHECK = "PERFORM memplane_check_workspace_quotas(p_ws, added, added_bytes);"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--calls", type=int, default=1_600, help="calls per variant, over all rounds")
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    p.add_argument("--no-hnsw", action="store_true", help="drop the HNSW indexes of both tables first")
    p.add_argument("--indexed", type=int, default=1_000, help="memories the indexer's UPDATE is timed over, each way")
    return p.parse_args()


def _cut(source: str, start: str, end: str, replacement: str) -> str:
    """*source* with the text from *start* up to (not including) *end* replaced."""
    a = source.index(start)
    return source[:a] + replacement + source[source.index(end, a) :]


def variants(source: str) -> dict[str, str]:
    """CREATE FUNCTION texts of the cut copies, by name, from the stored function's definition."""
    no_df = _cut(source, "    df AS (", "    pick AS (", "    df AS (SELECT 1 WHERE false),\n")
    no_ev = _cut(source, "    ev AS (", "    SELECT (SELECT ok FROM go)", "    ev AS (SELECT 1)\n")
    both = _cut(no_df, "    ev AS (", "    SELECT (SELECT ok FROM go)", "    ev AS (SELECT 1)\n")
    if _QUOTA_CHECK not in both:
        raise ValueError("the quota check of memplane_insert_memories changed; update bench/ingest_parts.py")
    texts = {"no_df": no_df, "no_ev": no_ev, "no_df_ev": both, "bare": both.replace(_QUOTA_CHECK, "")}
    return {name: text.replace(INSERT_FUNCTION + "(", f"{INSERT_FUNCTION}_{name}(", 1) for name, text in texts.items()}


async def fetch_one(conn: psycopg.AsyncConnection[Any], query: str, params: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The one row *query* returns (a dict: connections of this bench use dict_row)."""
    row = await (await conn.execute(query, params)).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query!r}")
    return dict(row)


async def connect(dsn: str) -> tuple[psycopg.AsyncConnection[Any], psutil.Process]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row)
    await register_vector_async(conn)
    register_array_dumpers(conn)
    return conn, psutil.Process(int((await fetch_one(conn, "SELECT pg_backend_pid() AS pid"))["pid"]))


async def main() -> None:
    args = parse_args()
    environment_banner("ingest_parts", args)
    turns = locomo_turns(args.locomo)
    rng = np.random.default_rng(args.seed)
    count = iter(range(10**9))

    def next_row() -> tuple[str, str, np.ndarray]:
        i = next(count)
        vector = rng.standard_normal(384).astype(np.float32)
        return f"user-{i % 100:04d}", f"{turns[i % len(turns)]} ({i})", vector / np.linalg.norm(vector)

    held_off = VectorIndexSettings(interval_seconds=60, scan_interval_seconds=3600)  # the backlog is this bench's
    async with bench_server(vector_index=held_off) as stack:
        dsn, workspace = stack.app.db.dsn, stack.workspace
        await create_raw_table(dsn, workspace.embedding_dimensions)
        conn, backend = await connect(dsn)
        raw_conn, raw_backend = await connect(dsn)
        try:
            definition = "SELECT pg_get_functiondef(p.oid) AS src FROM pg_proc p WHERE p.proname = %s"
            source = (await fetch_one(conn, definition, (INSERT_FUNCTION,)))["src"]
            for name, text in variants(source).items():
                await conn.execute(text)
                await conn.execute(f"GRANT EXECUTE ON FUNCTION {INSERT_FUNCTION}_{name} TO memplane_tenant")
            if args.no_hnsw:
                await drop_hnsw(conn)

            def function_call(function: str, *, record: bool, dedupe: bool) -> Callable[[], Awaitable[None]]:
                statement = insert_statement(function)

                async def call() -> None:
                    await insert_one(conn, workspace, statement, next_row(), record=record, dedupe=dedupe)

                return call

            async def plain() -> None:
                user, text, vector = next_row()
                await conn.execute(_PLAIN, (workspace.key, uuid.uuid4(), user, text, vector, text, len(text.encode())))

            async def raw() -> None:
                await raw_conn.execute(INSERT, next_row())

            parts: dict[str, tuple[Callable[[], Awaitable[None]], psutil.Process]] = {
                "full (as AddMemories sends it)": (function_call(INSERT_FUNCTION, record=True, dedupe=True), backend),
                "no lexeme_df": (function_call(f"{INSERT_FUNCTION}_no_df", record=True, dedupe=True), backend),
                "no events": (function_call(f"{INSERT_FUNCTION}_no_ev", record=True, dedupe=True), backend),
                "no lexeme_df, no events": (
                    function_call(f"{INSERT_FUNCTION}_no_df_ev", record=True, dedupe=True),
                    backend,
                ),
                "bare (+ no quota, record, dedupe)": (
                    function_call(f"{INSERT_FUNCTION}_bare", record=False, dedupe=False),
                    backend,
                ),
                "plain INSERT into memories": (plain, backend),
                "raw INSERT (ingest_sql.py)": (raw, raw_backend),
            }
            figures = await measure(conn, parts, calls=args.calls, rounds=args.rounds)
            indexer: dict[str, tuple[float, float]] = {}
            if not args.no_hnsw:
                indexer["with its graph insert"] = await index_cost(conn, backend, workspace.key, args.indexed)
                await drop_hnsw(conn)
            indexer["without (HNSW dropped)"] = await index_cost(conn, backend, workspace.key, args.indexed)
        finally:
            await conn.close()
            await raw_conn.close()
    raw_cpu = figures["raw INSERT (ingest_sql.py)"][0]
    print_table(
        f"PostgreSQL per one-memory call ({args.calls:,} calls per variant in {args.rounds} alternating rounds,"
        f" HNSW {'dropped' if args.no_hnsw else 'kept'}): backend CPU ms (median of rounds) and WAL bytes",
        ["variant", "backend CPU ms", "÷ raw INSERT", "WAL bytes"],
        [[name, cpu, cpu / raw_cpu, wal] for name, (cpu, wal) in figures.items()],
    )
    print_table(
        f"The vector indexer's UPDATE per memory ({args.indexed:,} of the rows above, {BATCH_SIZE} per statement)",
        ["UPDATE", "backend CPU ms", "WAL bytes"],
        [[name, cpu, wal] for name, (cpu, wal) in indexer.items()],
    )
    closing_banner()


async def drop_hnsw(conn: psycopg.AsyncConnection[Any]) -> None:
    """Drop every HNSW index of a plain table or partition (this bench's scratch database)."""
    cur = await conn.execute(
        "SELECT c.oid::regclass::text AS idx FROM pg_class c JOIN pg_am a ON a.oid = c.relam"
        " JOIN pg_index i ON i.indexrelid = c.oid JOIN pg_class t ON t.oid = i.indrelid"
        " WHERE a.amname = 'hnsw' AND t.relkind = 'r'"
    )
    for row in await cur.fetchall():
        await conn.execute(f"DROP INDEX {row['idx']}")


async def index_cost(
    conn: psycopg.AsyncConnection[Any], backend: psutil.Process, workspace_key: int, rows: int
) -> tuple[float, float]:
    """The indexer's statement over up to *rows* of the workspace's backlog, in its
    batches: (backend CPU ms, WAL bytes) per memory indexed. Raises `RuntimeError` when the
    backlog holds none."""
    lsn = (await fetch_one(conn, "SELECT pg_current_wal_insert_lsn()::text AS l"))["l"]
    before = backend.cpu_times()
    done = 0
    while done < rows:
        cur = await conn.execute(INDEX_BATCH, {"ws": workspace_key, "batch": min(BATCH_SIZE, rows - done)})
        if cur.rowcount <= 0:
            break
        done += cur.rowcount
    after = backend.cpu_times()
    if done == 0:
        raise RuntimeError("no backlog left to index: raise --calls or lower --indexed")
    wal = await fetch_one(conn, "SELECT pg_current_wal_insert_lsn() - %s::pg_lsn AS d", (lsn,))
    cpu = (after.user + after.system - before.user - before.system) * 1000 / done
    return cpu, float(wal["d"]) / done


async def insert_one(
    conn: psycopg.AsyncConnection[Any],
    workspace: Workspace,
    statement: str,
    row: tuple[str, str, np.ndarray],
    *,
    record: bool,
    dedupe: bool,
) -> None:
    """One memory through *statement* (`insert_statement` of a variant), as AddMemories sends it."""
    user, text, vector = row
    items = [PreparedMemory(NewMemory(content=text, scope=Scope(user_id=user)), text, vector)]
    now = datetime.now(UTC)
    claim = RequestRecord(uuid.uuid4().hex, "AddMemories", bytes(32)) if record else None
    params = insert_params(
        workspace,
        items,
        new_memories(workspace, items, now),
        actor="bench",
        request_id="bench",
        now=now,
        record=claim,
        dedupe=dedupe,
        in_graph=False,
    )
    await (await conn.execute(statement, params)).fetchall()


async def measure(
    conn: psycopg.AsyncConnection[Any],
    parts: dict[str, tuple[Callable[[], Awaitable[None]], psutil.Process]],
    *,
    calls: int,
    rounds: int,
) -> dict[str, tuple[float, float]]:
    """{variant: (backend CPU ms per call, median of rounds; WAL bytes per call, median)}."""
    per_round = max(1, calls // rounds)
    cpu: dict[str, list[float]] = {name: [] for name in parts}
    wal: dict[str, list[float]] = {name: [] for name in parts}
    for _, (call, _) in parts.items():
        for _ in range(10):  # untimed: statements prepared, caches warm
            await call()
    for r in range(rounds):
        log(f"round {r + 1} of {rounds}")
        for name, (call, process) in parts.items() if r % 2 == 0 else reversed(parts.items()):
            lsn = (await fetch_one(conn, "SELECT pg_current_wal_insert_lsn()::text AS l"))["l"]
            before = process.cpu_times()
            for _ in range(per_round):
                await call()
            after = process.cpu_times()
            row = await fetch_one(conn, "SELECT pg_current_wal_insert_lsn() - %s::pg_lsn AS d", (lsn,))
            cpu[name].append((after.user + after.system - before.user - before.system) * 1000 / per_round)
            wal[name].append(float(row["d"]) / per_round)
    return {name: (float(np.median(cpu[name])), float(np.median(wal[name]))) for name in parts}


if __name__ == "__main__":
    asyncio.run(main())
