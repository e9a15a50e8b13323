"""Bursts of one-memory adds: group commit on against off, in one run (issue 31, item 3).

What runs
  - the peers bench's embedding endpoint (bench/peers_workers/embed_server.py: OpenAI's
    `/v1/embeddings` over a content-hash cache warmed with every text first), so every add
    embeds its text over HTTP as a user's add does;
  - two `memplane serve` processes on one embedded PostgreSQL, each with its in-process
    embedding cache off: one with group commit on (the default,
    `memplane.server.writeback.group_commit`), one with MEMPLANE_GROUP_COMMIT__ENABLED=false;
  - per round and configuration, a fresh workspace and --clients concurrent callers, each
    with a channel of its own (as many agents would), adding the LoCoMo turns one memory per
    AddMemories call (a request id each, as `AsyncMemplaneClient` sends) until all are in.
  The configurations take turns, the order rotating each round, so a passing load falls on
  both alike; the figures are the medians of the rounds.

Printed per configuration and number of clients: memories/s, latency p50 / p99 (ms), CPU
milliseconds per add by process (PostgreSQL's backends and helpers, the server, this
process, the endpoint), the adds per transaction (by the xmin of their ADD events: 1.0 is every
add alone), and on / off.

    python bench/ingest_burst.py [--conversations 3] [--clients 1 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import psycopg
from _harness import (
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
    server_process,
    workspace_key,
)
from peers import CACHE, DIMENSIONS, MODEL, endpoint, memplane_env, peer_text
from peers_interleave import _rotated
from peers_sql import Turn, _turn_items, _turn_memory, cpu_seconds

from memplane.client import AsyncMemplaneClient
from memplane.eval.locomo import load_locomo
from memplane.server.settings import EmbeddingSettings

CONFIGS = {"group commit on": "true", "group commit off": "false"}


@dataclass
class Figures:
    """One configuration at one number of clients, a value per round."""

    rate: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    per_transaction: list[float] = field(default_factory=list)


async def burst(target: str, key: str, turns: Sequence[Turn], clients: int) -> tuple[float, list[float]]:
    """Add *turns* one per call from *clients* concurrent callers; (seconds, latencies)."""
    channels = [AsyncMemplaneClient(target, key, timeout=120) for _ in range(clients)]
    latencies: list[float] = []
    pending = iter(turns)

    async def caller(client: AsyncMemplaneClient) -> None:
        for turn in pending:
            started = time.perf_counter()
            await client.add_memories([_turn_memory(turn, np.empty(0, dtype=np.float32))])
            latencies.append(time.perf_counter() - started)

    try:
        started = time.perf_counter()
        await asyncio.gather(*(caller(c) for c in channels))
        return time.perf_counter() - started, latencies
    finally:
        for c in channels:
            await c.close()


async def transactions(dsn: str, name: str) -> int:
    """Distinct transactions (xmin) that wrote the workspace's ADD events: one per add stored
    alone, one per group (the memories' own xmin moves when the vector indexer updates them)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(DISTINCT e.xmin::text) FROM memory_events e JOIN workspaces w ON w.key = e.workspace_key"
            " WHERE w.name = %s AND e.kind = 'ADD'",
            (name,),
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def cpu_by_role(stack: Stack, served: Stack, endpoint_pid: int) -> dict[str, float]:
    """CPU seconds so far: PostgreSQL (its processes), the server, this process (the callers,
    and the bench's own idle in-process server), the endpoint."""
    client, database = cpu_seconds(stack.data_dir / "pgdata")
    return {
        "database": database,
        "server": process_cpu_seconds([served.pid]),
        "client": client,
        "endpoint": process_cpu_seconds([endpoint_pid]),
    }


async def measure(
    f: Figures, served: Stack, stack: Stack, *, ws: str, turns: Sequence[Turn], clients: int, endpoint_pid: int
) -> None:
    """One burst into a new workspace *ws* through *served*; its figures appended to *f*."""
    key = await workspace_key(served.target, stack.admin_key, ws)
    before = cpu_by_role(stack, served, endpoint_pid)
    seconds, latencies = await burst(served.target, key, turns, clients)
    after = cpu_by_role(stack, served, endpoint_pid)
    cpu = {role: after[role] - before[role] for role in after}
    f.rate.append(len(turns) / seconds)
    f.p50.append(ms(pct(latencies, 50)))
    f.p99.append(ms(pct(latencies, 99)))
    for role, used in cpu.items():
        f.cpu.setdefault(role, []).append(ms(used / len(turns)))
    f.per_transaction.append(len(turns) / await transactions(stack.app.db.dsn, ws))


async def main(args: argparse.Namespace) -> None:
    environment_banner("ingest_burst", args)
    turns = _turn_items(load_locomo(args.locomo, args.conversations))
    log(f"{len(turns)} turns")
    figures = {(name, c): Figures() for name in CONFIGS for c in args.clients}
    async with endpoint(CACHE / "embed-cache.npz") as ep:
        await ep.vectors(sorted({peer_text(t) for t in turns}))
        embedding = EmbeddingSettings(
            provider="openai", base_url=ep.url, model=MODEL, dimensions=DIMENSIONS, cache_size=0
        )
        async with bench_server(embedding=embedding) as stack, contextlib.AsyncExitStack() as exits:
            servers = {
                name: await exits.enter_async_context(
                    server_process(stack, **memplane_env(ep, cache_size=0), MEMPLANE_GROUP_COMMIT__ENABLED=enabled)
                )
                for name, enabled in CONFIGS.items()
            }
            for round_no in range(args.rounds):
                for clients in args.clients:
                    for name in _rotated(list(CONFIGS), round_no):
                        ws = f"burst-{round_no}-{clients}-{name.split()[-1]}"
                        f = figures[(name, clients)]
                        await measure(f, servers[name], stack, ws=ws, turns=turns, clients=clients, endpoint_pid=ep.pid)
                        log(f"round {round_no + 1}, {clients} clients, {name}: {f.rate[-1]:.0f}/s")
    report(figures, args.clients)
    closing_banner()


def report(figures: dict[tuple[str, int], Figures], clients: Sequence[int]) -> None:
    roles = ["database", "server", "client", "endpoint"]
    rows = []
    for c in clients:
        off = statistics.median(figures[("group commit off", c)].rate)
        for name in CONFIGS:
            f = figures[(name, c)]
            cpu = [statistics.median(f.cpu[r]) for r in roles]
            rows.append([
                c, name, statistics.median(f.rate), statistics.median(f.p50), statistics.median(f.p99),
                *cpu, sum(cpu), statistics.median(f.per_transaction), statistics.median(f.rate) / off,
            ])  # fmt: skip
    print_table(
        "One-memory AddMemories from concurrent callers, embedding over HTTP (medians of the rounds)",
        ["clients", "configuration", "memories/s", "p50 ms", "p99 ms", *(f"cpu ms {r}" for r in roles),
         "cpu ms total", "adds per transaction", "÷ off"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--conversations", type=int, default=3, help="LoCoMo conversations whose turns are added")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8], help="concurrent callers")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each configuration once per round)")
    asyncio.run(main(parser.parse_args()))
