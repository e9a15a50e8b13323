"""A bounded load test: mixed SearchMemories / AddMemories / PrepareContext traffic at a
fixed concurrency for a fixed number of requests, against a loopback server.

Server: `bench_server()` (embedded PostgreSQL in a temp dir, the default settings) and,
unless --in-process, `server_process()`: `memplane serve` as a process of its own on the
same database, as a cluster runs it (the load generator does not share its event loop or
its RSS). The workspace is seeded with --seed-memories LoCoMo turns through AddMemories
(the server embeds them). Then --concurrency callers, each with its own channel, send
--requests calls in all, drawn at random (--seed) in the proportions --mix:

- search: SearchMemories of one LoCoMo question (hybrid, top_k 10);
- add: AddMemories of one LoCoMo turn with a request_id (the server embeds it);
- prepare: PrepareContext of --prepare-turns LoCoMo turns at a --prepare-window token
  window, extractive (no LLM), so past the threshold it compacts and writes the transcript.

Prints throughput, p50/p99 per RPC kind, errors per status code and kind, and the
server process's RSS (psutil) before the load, at its peak (sampled every 0.5 s) and
after. A figure, not a test: nothing is asserted. Bounded by --requests and
--max-seconds (no new call starts after that).

Run: `python bench/load.py [--requests 2000] [--concurrency 64]`; dry run
`python bench/load.py --requests 200 --seed-memories 100`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence

import psutil  # type: ignore[import-untyped]
from _harness import (
    Stack,
    bench_server,
    closing_banner,
    common_args,
    environment_banner,
    locomo_questions,
    locomo_turns,
    log,
    memory_input,
    ms,
    pct,
    print_table,
    seed,
    server_process,
)

from memplane.client import AsyncMemplaneClient
from memplane.errors import MemplaneError
from memplane.server.api.errors import status_code_of
from memplane.server.settings import QuotaSettings
from memplane.v1 import compaction_pb2, memory_pb2

KINDS = ("search", "add", "prepare")
RSS_SAMPLE_SECONDS = 0.5
MIB = 1024 * 1024


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--requests", type=int, default=2000, help="calls in all")
    p.add_argument("--concurrency", type=int, default=64, help="concurrent callers, one channel each")
    p.add_argument("--mix", default="search=6,add=3,prepare=1", help="relative weights of the RPC kinds")
    p.add_argument("--seed-memories", type=int, default=500, help="LoCoMo turns stored before the load")
    p.add_argument("--prepare-turns", type=int, default=40, help="messages of one PrepareContext")
    p.add_argument("--prepare-window", type=int, default=1_000, help="max_input_tokens of PrepareContext")
    p.add_argument("--timeout", type=float, default=60.0, help="deadline of each call, seconds")
    p.add_argument("--max-seconds", type=float, default=600.0, help="no call starts after this")
    p.add_argument(
        "--workspace-concurrency",
        type=int,
        default=0,
        help="the server's quota.max_concurrent_requests_per_workspace (default 0: unlimited, so the load "
        "measures the server rather than the noisy-neighbour limit; the load is one workspace)",
    )
    p.add_argument("--in-process", action="store_true", help="load the in-process server instead of a process")
    return p.parse_args()


def parse_mix(text: str) -> dict[str, float]:
    """{"search": 6.0, ...} from "search=6,add=3,prepare=1"; ValueError for an unknown kind."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        if kind.strip() not in KINDS:
            raise ValueError(f"unknown kind {kind!r} in --mix; choose from {KINDS}")
        weights[kind.strip()] = float(weight)
    return weights


class Caller:
    """Builds and sends one call of each kind from LoCoMo text."""

    def __init__(self, args: argparse.Namespace, turns: Sequence[str], questions: Sequence[str]) -> None:
        self._args = args
        self._turns = turns
        self._questions = questions

    async def __call__(self, client: AsyncMemplaneClient, kind: str, i: int) -> None:
        if kind == "search":
            await client.search(self._questions[i % len(self._questions)], top_k=10)
        elif kind == "add":
            turn = self._turns[(7919 * i) % len(self._turns)]
            await client.add_memories([memory_input(turn, f"u{i % 50}")], request_id=uuid.uuid4().hex)
        else:
            start = (31 * i) % max(1, len(self._turns) - self._args.prepare_turns)
            messages = [
                compaction_pb2.ContextMessage(
                    id=f"m{j}",
                    role=memory_pb2.MESSAGE_ROLE_USER if j % 2 == 0 else memory_pb2.MESSAGE_ROLE_ASSISTANT,
                    content=[compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=text))],
                )
                for j, text in enumerate(self._turns[start : start + self._args.prepare_turns])
            ]
            await client.prepare_context(
                messages,
                max_input_tokens=self._args.prepare_window,
                summarizer=compaction_pb2.SUMMARIZER_CHOICE_EXTRACTIVE,
                scope=memory_pb2.Scope(user_id=f"u{i % 50}", session_id=f"load-{i}"),
            )


async def rss_sampler(process: psutil.Process, peak: list[int], stop: asyncio.Event) -> None:
    """Keep peak[0] at the largest RSS seen until *stop* is set."""
    while not stop.is_set():
        peak[0] = max(peak[0], process.memory_info().rss)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RSS_SAMPLE_SECONDS)


async def run(args: argparse.Namespace, stack: Stack, caller: Caller) -> None:
    """The load, then the tables."""
    weights = parse_mix(args.mix)
    rng = random.Random(args.seed)
    plan = rng.choices(list(weights), weights=list(weights.values()), k=args.requests)
    process = psutil.Process(stack.pid)
    rss_before = process.memory_info().rss
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: Counter[tuple[str, str]] = Counter()
    todo = iter(enumerate(plan))
    deadline = time.perf_counter() + args.max_seconds

    async def worker(client: AsyncMemplaneClient) -> None:
        for i, kind in todo:
            if time.perf_counter() > deadline:
                return
            started = time.perf_counter()
            try:
                await caller(client, kind, i)
            except MemplaneError as error:
                errors[(kind, status_code_of(error).name)] += 1
                if sum(errors.values()) == 1:
                    log(f"first failure ({kind}): {error!r}")
                continue
            latencies[kind].append(time.perf_counter() - started)

    clients = [stack.client(timeout=args.timeout) for _ in range(args.concurrency)]
    peak = [rss_before]
    stop = asyncio.Event()
    sampler = asyncio.create_task(rss_sampler(process, peak, stop))
    log(f"load: {args.requests} calls at concurrency {args.concurrency} ({args.mix})")
    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker(c) for c in clients))
    finally:
        seconds = time.perf_counter() - started
        stop.set()
        await sampler
        for c in clients:
            await c.close()
    rss_after = process.memory_info().rss
    done = sum(len(v) for v in latencies.values())
    failed = sum(errors.values())
    total = done + failed
    print(f"\n{total} calls in {seconds:.1f} s: {total / seconds:.1f} calls/s, {done} OK, {failed} failed")
    rows: list[list[object]] = []
    for kind in KINDS:
        values = latencies.get(kind, [])
        sent = len(values) + sum(n for (k, _), n in errors.items() if k == kind)
        if sent:
            rows.append([kind, sent, len(values), len(values) / seconds, ms(pct(values, 50)), ms(pct(values, 99))])
    print_table("per RPC kind (latency in ms, client side)", ["kind", "sent", "ok", "ok/s", "p50", "p99"], rows)
    error_rows: list[list[object]] = [[kind, code, n] for (kind, code), n in sorted(errors.items())]
    print_table("errors by status code", ["kind", "code", "count"], error_rows or [["-", "none", 0]])
    print_table(
        f"server process RSS (pid {stack.pid}, MiB)",
        ["when", "rss"],
        [["before load", rss_before / MIB], ["peak (sampled)", peak[0] / MIB], ["after load", rss_after / MIB]],
    )


async def main(args: argparse.Namespace) -> None:
    environment_banner("load", args)
    turns = locomo_turns(args.locomo)
    questions = locomo_questions(args.locomo)
    caller = Caller(args, turns, questions)
    limit = args.workspace_concurrency
    async with bench_server(quota=QuotaSettings(max_concurrent_requests_per_workspace=limit)) as local:
        seeded = await seed(
            local,
            args.seed_memories,
            lambda a, b: [memory_input(t, f"u{j % 50}") for j, t in enumerate(turns[a:b], start=a)],
            batch_size=64,
            concurrency=2,
        )
        log(f"seeded {seeded.count} memories in {seeded.seconds:.1f} s")
        if args.in_process:
            await run(args, local, caller)
        else:
            env = {"MEMPLANE_QUOTA__MAX_CONCURRENT_REQUESTS_PER_WORKSPACE": str(limit)}
            async with server_process(local, **env) as remote:
                await run(args, remote, caller)
    closing_banner()


def _entry() -> None:
    asyncio.run(main(parse_args()))


if __name__ == "__main__":
    _entry()
