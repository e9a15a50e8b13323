"""CheckContext's cost at ~10k, ~100k and ~1M tokens: the algorithm in process, and the
call as a user meets it, over real gRPC.

Part 1, in process (no server, no database: the two pure steps CheckContext runs)
  1. `TokenCounter.count_messages` (quicktok, o200k_base by default, OpenAI cookbook
     framing) over a whole conversation;
  2. `split_context` on those counts (ReMe's check_context rules: reserve walk, current
     user turn, tool_use/tool_result and user/assistant pairs);
  3. both, as the service runs them per call.
  Each figure is the median and the best (milliseconds) of at least --repeats runs and
  at least --min-seconds of runs (small sizes run many times: single sub-millisecond
  runs are noisy on a shared box), after one warm-up run, with the garbage collector
  off while timing (as `timeit` does). The growth ratios time(100k)/time(10k) and
  time(1M)/time(100k) show the scaling: ~10 is linear (the token ratio is printed
  beside them, the conversations being only about 10x apart). Then plain counting
  throughput (millions of tokens per second): `count_text` on one big string (the 1M
  conversation's text) and `count_texts` on its per-message texts as one batch.

Part 2, over gRPC (skip with --no-grpc): `bench_server()` (embedded PostgreSQL,
  build_app, the grpc.aio server on loopback, one workspace and key), then
  `AsyncMemplaneClient.check_context` with the same messages (domain -> proto with
  `message_to_proto`, built once outside the timing), threshold and reserve, at each
  size: one warm-up call, then at least --grpc-repeats calls and at least
  --grpc-min-seconds of calls (at most --grpc-max-seconds per size), sequential, GC on.
  Printed per size: request size (MB = 10^6 bytes, and its share of the server's
  `grpc.max_message_bytes`, 16 MiB by default), reply size (kB), client-side p50 and
  best latency (ms), the server's own count+split time during those calls (the
  service's `check_context` wrapped with a timer, ms p50) next to the in-process p50 of
  part 1, end-to-end throughput (millions of tokens per second at p50) and whether the
  reply's split equals the in-process one, and the p50 and max latency (ms) of a grpc
  health Check sent every 0.05 s on its own channel during those calls: how long other
  requests wait while a check runs (the server parses, validates, counts and splits on
  its event loop; the client's own serialisation shares that loop here). Then the
  growth ratios of the gRPC times, and where the time goes: every step of the request
  path timed in process with the same functions (client: build the request from the
  messages, serialise; server: parse, proto -> domain with validation, count+split,
  build and serialise the reply; client: parse the reply; ms p50), their sum, and the
  rest of the client p50 (transport, gRPC, authentication, scheduling). Client and
  server share one process and one event loop, so the client's own CPU is inside the
  end-to-end figures.

Part 3, the message-size ceiling (skip with --no-limit-probe): k independent ~1M-token
  conversations (seeds --seed+1, ...) concatenated into one request, for the largest k
  whose request fits the server's limit and for k+1; prints each request's size, the
  first call's latency and the p50 of a few more (ms), and the outcome (the reply's
  total, or the error the client raises: the client sends any size, the server's
  receive limit decides).

Workload: `build_conversation` — synthetic but agent-shaped turns from a fixed seed: a
  user question; 0 to 8 tool rounds (an assistant message with an optional one-line
  preamble and 1-3 parallel tool_use blocks, one tool message per call with a
  multi-line output: grep hits, file excerpts, shell logs, search results as JSON; a
  few lines mostly, now and then a hundred); then the assistant's answer in 1-3
  paragraphs; about 100 tokens per message on average (~10,000 messages per 1M). It
  ends with the user's new question. Text is random words from a fixed vocabulary
  plus paths, numbers and identifiers; tool call ids are unique.
  Import it (`from context_check import build_conversation`) to replay the workload.

Split settings: --threshold 0 means half of each conversation (so every size is
  compacted) and --reserve 0 a tenth of it, at most 10,000 tokens (ReMe's reserve).

How long (2 shared cores, defaults): ~10 s in process, ~15 s over gRPC (server start
  included), ~10 s for the size probe: ~35 s in all.

    python bench/context_check.py [--sizes 10000,100000,1000000] [--no-grpc] [--no-in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import itertools
import json
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from _harness import Stack, bench_server, closing_banner, environment_banner, log, ms, pct, print_table
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memplane.client import AsyncMemplaneClient
from memplane.domain.context import Block, ContextMessage, ContextSplit, TextBlock, ToolResultBlock, ToolUseBlock
from memplane.domain.models import MessageRole
from memplane.errors import MemplaneError
from memplane.server.api.context_convert import message_to_proto, messages_from_proto, split_to_proto
from memplane.server.compaction.split import split_context
from memplane.text.tokens import DEFAULT_ENCODING, TokenCounter, token_counter
from memplane.v1 import compaction_pb2

T = TypeVar("T")

REME_RESERVE = 10_000
MAX_RUNS = 10_000
MAX_GRPC_CALLS = 1_000
HEALTH_INTERVAL = 0.05
"""Seconds between the health Checks sent while CheckContext calls run."""
VOCABULARY = (  # words of the synthetic text (English prose and engineering terms)
    "the a to of and in is it for on that with this as we be are was can by not from have at or an will "
    "if but all one more so when which what about there their they you your our need should would could "
    "config cluster deploy service request response latency timeout retry queue worker cache index query "
    "table schema column migration backup restore snapshot replica primary failover region zone node pod "
    "container image build release version branch commit merge review test suite fixture mock assert "
    "error warning exception trace stack log metric alert dashboard budget cost invoice egress storage "
    "bucket object upload download stream batch chunk buffer memory disk cpu thread process socket port "
    "token encoding summary context window prompt model agent tool call result output input message user "
    "assistant session history compaction threshold reserve limit quota tenant workspace key secret "
    "policy role permission audit event handler callback hook plugin module package import function "
    "method class field value default option flag parameter argument variable constant string number "
    "list map set array vector embedding search rank score filter sort page cursor offset scan plan "
    "because however therefore instead already still again only also just first next last previous "
    "check verify compare measure estimate reduce increase improve fix update remove add keep move copy "
    "run start stop restart install upgrade configure enable disable allow deny read write open close "
    "fast slow large small new old same different exact approximate stable flaky broken healthy ready "
    "Monday Tuesday Friday morning tonight yesterday week month quarter Berlin Tokyo Falcon Orion Atlas"
)
WORDS = tuple(VOCABULARY.split())
TOOLS = ("grep", "read_file", "run_shell", "web_search")
DIRS = ("services", "api", "storage", "compaction", "retrieval", "tests", "deploy", "docs")
EXTS = ("py", "go", "yaml", "sql", "md", "ts")


def build_conversation(target_tokens: int, *, seed: int = 0, encoding: str = DEFAULT_ENCODING) -> list[ContextMessage]:
    """An agent conversation of about *target_tokens* tokens (in *encoding*, chat framing
    included, as `TokenCounter.count_messages` counts), oldest first, ending with the
    user's new question; the same *seed* gives the same messages.

    Whole turns are added while they fit, so the result is within one turn (a few
    hundred to a few thousand tokens) under the target; tool call ids are unique.
    Raises `ValueError` for a non-positive target or an unknown encoding."""
    if target_tokens <= 0:
        raise ValueError(f"target_tokens must be > 0, got {target_tokens}")
    counter = token_counter(encoding)
    rng = random.Random(seed)
    question = _user(rng)
    budget = target_tokens - counter.count_message(question)
    messages: list[ContextMessage] = []
    used = 0
    call_no = 0
    while True:
        turn, call_no = _turn(rng, call_no)
        cost = sum(counter.count_messages(turn))
        if used + cost > budget:
            break
        messages.extend(turn)
        used += cost
    messages.append(question)
    return messages


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(lo, hi)))


def _sentences(rng: random.Random, lo: int, hi: int) -> str:
    out = []
    for _ in range(rng.randint(lo, hi)):
        s = _words(rng, 6, 22)
        out.append(s[0].upper() + s[1:] + rng.choice((".", ".", ".", "?", "!")))
    return " ".join(out)


def _path(rng: random.Random) -> str:
    parts = rng.sample(DIRS, k=rng.randint(1, 3))
    return "/".join([*parts, f"{rng.choice(WORDS[40:200])}_{rng.randint(1, 99)}.{rng.choice(EXTS)}"])


def _user(rng: random.Random) -> ContextMessage:
    text = _sentences(rng, 1, 3)
    if rng.random() < 0.2:
        text += f"\n\nSee {_path(rng)} line {rng.randint(1, 900)}."
    return ContextMessage(MessageRole.USER, (TextBlock(text),))


def _turn(rng: random.Random, call_no: int) -> tuple[list[ContextMessage], int]:
    """One user turn: question, 0-2 tool rounds, answer. Returns it and the next call number."""
    turn = [_user(rng)]
    rounds = rng.choices((0, 1, 2, 3, 5, 8), weights=(3, 3, 2, 1, 1, 0.5))[0]
    for _ in range(rounds):
        calls: list[ToolUseBlock] = []
        for _ in range(rng.choices((1, 2, 3), weights=(6, 3, 1))[0]):
            call_no += 1
            tool = rng.choice(TOOLS)
            calls.append(ToolUseBlock(f"call_{call_no:06d}_{rng.getrandbits(32):08x}", tool, _tool_input(rng, tool)))
        preamble: tuple[Block, ...] = (TextBlock(_sentences(rng, 1, 2)),) if rng.random() < 0.4 else ()
        turn.append(ContextMessage(MessageRole.ASSISTANT, (*preamble, *calls)))
        for c in calls:
            turn.append(ContextMessage(MessageRole.TOOL, (ToolResultBlock(c.id, _tool_output(rng, c.name), c.name),)))
    answer = "\n\n".join(_sentences(rng, 1, 4) for _ in range(rng.randint(1, 3)))
    turn.append(ContextMessage(MessageRole.ASSISTANT, (TextBlock(answer),)))
    return turn, call_no


def _tool_input(rng: random.Random, tool: str) -> str:
    if tool == "grep":
        args: dict[str, object] = {"pattern": rng.choice(WORDS[40:200]), "path": rng.choice(DIRS), "max": 50}
    elif tool == "read_file":
        start = rng.randint(1, 400)
        args = {"path": _path(rng), "start_line": start, "end_line": start + rng.randint(10, 80)}
    elif tool == "run_shell":
        args = {"command": f"make {rng.choice(('test', 'lint', 'build', 'bench'))} {rng.choice(DIRS)}"}
    else:
        args = {"query": _words(rng, 3, 8), "top_k": 5}
    return json.dumps(args)


def _tool_output(rng: random.Random, tool: str) -> str:
    lines = min(120, int(rng.paretovariate(1.3) * 2))  # mostly a few lines, now and then a hundred
    if tool == "grep":
        return "\n".join(f"{_path(rng)}:{rng.randint(1, 2000)}: {_words(rng, 4, 14)}" for _ in range(lines))
    if tool == "read_file":
        start = rng.randint(1, 400)
        return "\n".join(
            f"{start + i:5d}  {' ' * 4 * rng.randint(0, 3)}{rng.choice(WORDS[40:200])}_{rng.randint(0, 9)}"
            f" = {_words(rng, 2, 9)}"
            for i in range(lines)
        )
    if tool == "run_shell":
        return "\n".join(
            f"2026-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
            f"{rng.randint(0, 59):02d}Z {rng.choice(('INFO', 'INFO', 'WARN', 'ERROR'))} {_words(rng, 5, 16)}"
            for _ in range(lines)
        )
    hits = [
        {"title": _words(rng, 3, 8), "url": f"https://docs.example.com/{_path(rng)}", "snippet": _sentences(rng, 1, 3)}
        for _ in range(rng.randint(2, 6))
    ]
    return json.dumps(hits, indent=2)


# -- workloads -----------------------------------------------------------------------
@dataclass
class Workload:
    """One conversation with the split settings every part uses for it."""

    size: int
    """Target tokens given to `build_conversation`."""
    messages: list[ContextMessage]
    tokens: int
    """Tokens of the messages as counted (chat framing included)."""
    threshold: int
    """threshold_tokens of every check, in tokens."""
    reserve: int
    """reserve_tokens of every check, in tokens."""
    split: ContextSplit
    """The in-process count + split (the reference the gRPC replies must equal)."""
    check_p50: float = float("nan")
    """In-process count + split, median seconds (NaN when part 1 is skipped)."""
    check_best: float = float("nan")
    """In-process count + split, best seconds."""

    @property
    def label(self) -> str:
        return f"~{self.size:,}"


def make_workload(size: int, args: argparse.Namespace, counter: TokenCounter, *, seed: int) -> Workload:
    """Build the conversation of about *size* tokens and its reference split."""
    started = time.perf_counter()
    messages = build_conversation(size, seed=seed, encoding=args.encoding)
    counts = counter.count_messages(messages)
    tokens = sum(counts)
    threshold = args.threshold or tokens // 2
    reserve = args.reserve or min(REME_RESERVE, tokens // 10)
    split = split_context(
        messages,
        counts,
        system_prompt_tokens=0,
        previous_summary_tokens=0,
        threshold_tokens=threshold,
        reserve_tokens=reserve,
    )
    log(f"built ~{size:,} tokens (seed {seed}): {len(messages):,} messages in {time.perf_counter() - started:.1f} s")
    return Workload(size, messages, tokens, threshold, reserve, split)


# -- timing --------------------------------------------------------------------------
def timed(fn: Callable[[], T], repeats: int, min_seconds: float = 0.0) -> tuple[float, float, T]:
    """(median seconds, best seconds, result) of the timed calls of *fn*: one untimed
    warm-up call, then at least *repeats* calls and at least *min_seconds* of calls
    (at most `MAX_RUNS`). The garbage collector is off while timing, as in `timeit`."""
    out = fn()
    times: list[float] = []
    gc.collect()
    gc.disable()
    try:
        while len(times) < MAX_RUNS and (len(times) < repeats or sum(times) < min_seconds):
            started = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return statistics.median(times), min(times), out


async def timed_calls(
    call: Callable[[], Awaitable[T]], *, repeats: int, min_seconds: float, max_seconds: float
) -> tuple[list[float], T]:
    """(latencies in seconds, last result) of sequential awaited calls of *call*: one
    untimed warm-up call, then at least *repeats* calls and at least *min_seconds* of
    calls, but no new call once *max_seconds* have passed since the first timed one (at
    least one is timed) and at most `MAX_GRPC_CALLS`. The garbage collector stays on,
    as in a client."""
    out = await call()
    times: list[float] = []
    deadline = time.perf_counter() + max_seconds
    while len(times) < MAX_GRPC_CALLS and (len(times) < repeats or sum(times) < min_seconds):
        if times and time.perf_counter() > deadline:
            break
        started = time.perf_counter()
        out = await call()
        times.append(time.perf_counter() - started)
    return times, out


def check(counter: TokenCounter, messages: list[ContextMessage], threshold: int, reserve: int) -> ContextSplit:
    """Count then split, as the service does for one CheckContext call."""
    return split_context(
        messages,
        counter.count_messages(messages),
        system_prompt_tokens=0,
        previous_summary_tokens=0,
        threshold_tokens=threshold,
        reserve_tokens=reserve,
    )


# -- part 1: in process --------------------------------------------------------------
def in_process(args: argparse.Namespace, counter: TokenCounter, workloads: list[Workload]) -> None:
    """Time counting, splitting and both per workload (sets `check_p50` / `check_best`)
    and print the tables of part 1."""
    rows: list[list[object]] = []
    times: list[tuple[float, float, float, float, float, float]] = []  # p50 and best of each step
    for w in workloads:
        counts = counter.count_messages(w.messages)
        calls = sum(len(m.tool_use_ids()) for m in w.messages)
        count_med, count_best, _ = timed(
            functools.partial(counter.count_messages, w.messages), args.repeats, args.min_seconds
        )
        split_med, split_best, split = timed(
            functools.partial(
                split_context,
                w.messages,
                counts,
                system_prompt_tokens=0,
                previous_summary_tokens=0,
                threshold_tokens=w.threshold,
                reserve_tokens=w.reserve,
            ),
            args.repeats,
            args.min_seconds,
        )
        both_med, both_best, both = timed(
            functools.partial(check, counter, w.messages, w.threshold, w.reserve), args.repeats, args.min_seconds
        )
        if both != split or both != w.split:
            raise SystemExit("count + split disagrees with split on the same counts")
        w.check_p50, w.check_best = both_med, both_best
        rows.append(
            [
                w.label,
                w.tokens,
                len(w.messages),
                calls,
                ms(count_med),
                ms(count_best),
                w.tokens / count_best / 1e6,
                ms(split_med),
                ms(split_best),
                ms(both_med),
                ms(both_best),
                f"{split.keep_from:,} ({split.kept_tokens:,} tok)",
                "yes" if split.valid else "NO",
            ]
        )
        times.append((count_med, split_med, both_med, count_best, split_best, both_best))

    print_table(
        f"Part 1. CheckContext steps in process, {args.encoding}: median (p50) and best, ms"
        f" (>= {args.repeats} runs, >= {args.min_seconds} s each)",
        [
            "conversation",
            "tokens",
            "messages",
            "tool calls",
            "count p50",
            "count best",
            "count Mtok/s (best)",
            "split p50",
            "split best",
            "both p50",
            "both best",
            "keep_from (kept)",
            "valid",
        ],
        rows,
    )

    growth: list[list[object]] = []
    for (w0, t0), (w1, t1) in itertools.pairwise(zip(workloads, times, strict=True)):
        growth.append(
            [f"{w1.label} / {w0.label}", w1.tokens / w0.tokens, *(a / b for a, b in zip(t1, t0, strict=True))]
        )
    if growth:
        print_table(
            "Part 1. Growth of the in-process times (linear = the token ratio, ~10)",
            ["sizes", "token ratio", "count p50", "split p50", "both p50", "count best", "split best", "both best"],
            growth,
        )

    biggest = workloads[-1].messages
    big_text = "\n".join(m.text() for m in biggest)
    texts = [m.text() for m in biggest]
    text_med, text_best, text_tokens = timed(lambda: counter.count_text(big_text), args.repeats, args.min_seconds)
    batch_med, batch_best, batch_counts = timed(lambda: counter.count_texts(texts), args.repeats, args.min_seconds)
    batch_tokens = sum(batch_counts)
    print_table(
        f"Part 1. Plain counting throughput ({args.encoding}), the largest conversation's text",
        ["call", "texts", "chars", "tokens", "ms p50", "ms best", "Mtok/s (p50)", "Mtok/s (best)"],
        [
            [
                "count_text (one string)",
                1,
                len(big_text),
                text_tokens,
                ms(text_med),
                ms(text_best),
                text_tokens / text_med / 1e6,
                text_tokens / text_best / 1e6,
            ],
            [
                "count_texts (one batch)",
                len(texts),
                sum(len(t) for t in texts),
                batch_tokens,
                ms(batch_med),
                ms(batch_best),
                batch_tokens / batch_med / 1e6,
                batch_tokens / batch_best / 1e6,
            ],
        ],
    )


# -- part 2: over gRPC ---------------------------------------------------------------
CheckFn = Callable[..., tuple[ContextSplit, str]]


def sync_check(workspace: Any, messages: list[ContextMessage], **fields: Any) -> tuple[ContextSplit, str]:
    """What the service's (async) check_context computes, synchronously: count with the
    request's encoding, then split with its threshold and reserve (both set by the bench)."""
    counter = token_counter(fields.get("encoding") or workspace.token_encoding)
    split = split_context(
        messages,
        counter.count_messages(messages),
        system_prompt_tokens=0,
        previous_summary_tokens=0,
        threshold_tokens=fields["threshold_tokens"],
        reserve_tokens=fields["reserve_tokens"],
    )
    return split, counter.encoding


@dataclass
class GrpcFigures:
    """What one size measured over gRPC; times in seconds, sizes in bytes."""

    workload: Workload
    request_bytes: int
    reply_bytes: int
    latencies: list[float]
    server_times: list[float]
    """The service's count + split inside the server during the timed calls."""
    health: list[float]
    """Latencies of the health Checks sent every `HEALTH_INTERVAL` s during the calls."""
    same_split: bool
    steps: dict[str, float] = field(default_factory=dict)
    """Median seconds of each step of the request path, timed in process."""


def request_fields(w: Workload, encoding: str) -> dict[str, Any]:
    """CheckContextRequest fields besides the messages."""
    return {"threshold_tokens": w.threshold, "reserve_tokens": w.reserve, "encoding": encoding}


def same_split(reply: compaction_pb2.ContextSplit, split: ContextSplit) -> bool:
    """Whether a gRPC reply carries the in-process split."""
    return (
        reply.total_tokens == split.total_tokens
        and tuple(reply.message_tokens) == split.message_tokens
        and reply.keep_from_index == split.keep_from
        and reply.kept_tokens == split.kept_tokens
        and reply.needs_compaction == split.needs_compaction
        and reply.valid == split.valid
    )


def request_path(
    stack: Stack,
    check_fn: CheckFn,
    protos: list[compaction_pb2.ContextMessage],
    fields: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, float]:
    """Median seconds of each step a CheckContext call runs, timed in process with the
    functions the client and the server use (GC off while timing)."""
    limits = stack.app.settings.limits
    max_messages = stack.app.settings.compaction.max_messages
    request = compaction_pb2.CheckContextRequest(messages=protos, **fields)
    data = request.SerializeToString()
    parsed = compaction_pb2.CheckContextRequest.FromString(data)
    domain = messages_from_proto(parsed.messages, limits, max_messages=max_messages, required=False)
    split, encoding = check_fn(stack.workspace, domain, **fields)
    reply = compaction_pb2.CheckContextResponse(split=split_to_proto(split, encoding)).SerializeToString()
    steps: dict[str, Callable[[], object]] = {
        "client: build request": lambda: compaction_pb2.CheckContextRequest(messages=protos, **fields),
        "client: serialise": request.SerializeToString,
        "server: parse": lambda: compaction_pb2.CheckContextRequest.FromString(data),
        "server: proto -> domain (validated)": lambda: messages_from_proto(
            parsed.messages, limits, max_messages=max_messages, required=False
        ),
        "server: count + split": lambda: check_fn(stack.workspace, domain, **fields),
        "server: build + serialise reply": lambda: compaction_pb2.CheckContextResponse(
            split=split_to_proto(split, encoding)
        ).SerializeToString(),
        "client: parse reply": lambda: compaction_pb2.CheckContextResponse.FromString(reply),
    }
    return {name: timed(fn, args.path_repeats, args.path_min_seconds)[0] for name, fn in steps.items()}


async def measure_grpc(
    stack: Stack,
    client: AsyncMemplaneClient,
    *,
    check_fn: CheckFn,
    server_times: list[float],
    health: health_pb2_grpc.HealthStub,
    w: Workload,
    args: argparse.Namespace,
) -> GrpcFigures:
    """Time CheckContext over gRPC for one workload, then its request path in process."""
    started = time.perf_counter()
    protos = [message_to_proto(m) for m in w.messages]
    log(f"{w.label}: {len(protos):,} messages to proto in {time.perf_counter() - started:.2f} s (untimed)")
    fields = request_fields(w, args.encoding)
    request_bytes = compaction_pb2.CheckContextRequest(messages=protos, **fields).ByteSize()
    server_times.clear()
    stop = asyncio.Event()
    checks: list[float] = []
    probe = asyncio.create_task(health_probe(health, stop, checks))
    try:
        latencies, reply = await timed_calls(
            lambda: client.check_context(protos, **fields),
            repeats=args.grpc_repeats,
            min_seconds=args.grpc_min_seconds,
            max_seconds=args.grpc_max_seconds,
        )
    finally:
        stop.set()
        await probe
    in_call = server_times[-len(latencies) :]
    log(f"{w.label}: {len(latencies)} calls, p50 {ms(pct(latencies, 50)):.1f} ms; timing the request path in process")
    figures = GrpcFigures(
        workload=w,
        request_bytes=request_bytes,
        reply_bytes=compaction_pb2.CheckContextResponse(split=reply).ByteSize(),
        latencies=latencies,
        server_times=in_call,
        health=checks,
        same_split=same_split(reply, w.split),
    )
    figures.steps = request_path(stack, check_fn, protos, fields, args)
    return figures


def print_grpc(figures: list[GrpcFigures], max_bytes: int, args: argparse.Namespace) -> None:
    """The tables of part 2."""
    rows: list[list[object]] = []
    for f in figures:
        w = f.workload
        p50 = pct(f.latencies, 50)
        rows.append(
            [
                w.label,
                w.tokens,
                len(w.messages),
                f.request_bytes / 1e6,
                100.0 * f.request_bytes / max_bytes,
                f.reply_bytes / 1e3,
                len(f.latencies),
                ms(p50),
                ms(min(f.latencies)),
                ms(max(f.latencies)),
                ms(pct(f.server_times, 50)),
                ms(w.check_p50),
                w.tokens / p50 / 1e6,
                ms(pct(f.health, 50)),
                ms(max(f.health, default=float("nan"))),
                "yes" if f.same_split else "NO",
            ]
        )
    print_table(
        f"Part 2. CheckContext over gRPC (loopback, AsyncMemplaneClient, {args.encoding}): client-side latency, ms"
        f" (>= {args.grpc_repeats} calls, >= {args.grpc_min_seconds} s per size; limit {max_bytes:,} bytes)",
        [
            "conversation",
            "tokens",
            "messages",
            "request MB",
            "% of limit",
            "reply kB",
            "calls",
            "client p50",
            "client best",
            "client max",
            "server count+split p50",
            "in-process count+split p50",
            "Mtok/s (client p50)",
            "health p50",
            "health max",
            "split = in-process",
        ],
        rows,
    )

    growth: list[list[object]] = []
    for f0, f1 in itertools.pairwise(figures):
        growth.append(
            [
                f"{f1.workload.label} / {f0.workload.label}",
                f1.workload.tokens / f0.workload.tokens,
                f1.request_bytes / f0.request_bytes,
                pct(f1.latencies, 50) / pct(f0.latencies, 50),
                min(f1.latencies) / min(f0.latencies),
                pct(f1.server_times, 50) / pct(f0.server_times, 50),
            ]
        )
    if growth:
        print_table(
            "Part 2. Growth of the gRPC times (linear = the token ratio)",
            ["sizes", "token ratio", "request bytes", "client p50", "client best", "server count+split p50"],
            growth,
        )

    names = list(figures[0].steps)
    path_rows: list[list[object]] = [[name, *(ms(f.steps[name]) for f in figures)] for name in names]
    sums = [sum(f.steps.values()) for f in figures]
    server_sums = [sum(v for k, v in f.steps.items() if k.startswith("server")) for f in figures]
    client_p50 = [pct(f.latencies, 50) for f in figures]
    path_rows += [
        ["sum of the server steps", *(ms(s) for s in server_sums)],
        ["sum of all steps", *(ms(s) for s in sums)],
        ["client p50 over gRPC", *(ms(c) for c in client_p50)],
        ["rest: transport, gRPC, auth, scheduling", *(ms(c - s) for c, s in zip(client_p50, sums, strict=True))],
        ["server steps / client p50", *(s / c for s, c in zip(server_sums, client_p50, strict=True))],
    ]
    print_table(
        f"Part 2. Where a CheckContext call's time goes: each step timed in process, ms p50"
        f" (>= {args.path_repeats} runs, >= {args.path_min_seconds} s each)",
        ["step", *(f"{f.workload.label} tok" for f in figures)],
        path_rows,
    )


async def health_probe(stub: health_pb2_grpc.HealthStub, stop: asyncio.Event, out: list[float]) -> None:
    """Append the latency (seconds) of a health Check every `HEALTH_INTERVAL` s until *stop*."""
    while not stop.is_set():
        started = time.perf_counter()
        await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
        out.append(time.perf_counter() - started)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), HEALTH_INTERVAL)


# -- part 3: the message-size ceiling ------------------------------------------------
async def limit_probe(
    client: AsyncMemplaneClient, counter: TokenCounter, unit: Workload, max_bytes: int, args: argparse.Namespace
) -> None:
    """CheckContext with k concatenated ~unit-size conversations for the largest k that
    fits *max_bytes* and for k + 1; prints the sizes (MB = 10^6 bytes), the first
    call's latency, the p50 of a few more calls when it succeeded (ms), and the outcome
    (the reply's total, or the error the client raised)."""
    unit_bytes = compaction_pb2.CheckContextRequest(messages=[message_to_proto(m) for m in unit.messages]).ByteSize()
    k_fit = max(1, min(args.probe_max_k - 1, max_bytes // unit_bytes))
    parts = [unit.messages]
    for i in range(1, k_fit + 1):
        parts.append(build_conversation(unit.size, seed=args.seed + i, encoding=args.encoding))
    rows: list[list[object]] = []
    for k in (k_fit, k_fit + 1):
        messages = [m for part in parts[:k] for m in part]
        tokens = sum(counter.count_messages(messages))
        protos = [message_to_proto(m) for m in messages]
        fields = {"threshold_tokens": tokens // 2, "reserve_tokens": REME_RESERVE, "encoding": args.encoding}
        size = compaction_pb2.CheckContextRequest(messages=protos, **fields).ByteSize()
        log(f"size probe: {k} x {unit.label} = {tokens:,} tokens, {size / 1e6:.1f} MB")
        started = time.perf_counter()
        again = float("nan")
        try:
            reply = await client.check_context(protos, **fields)
            first = time.perf_counter() - started
            outcome = f"ok, total_tokens {reply.total_tokens:,}"
            latencies, _ = await timed_calls(
                functools.partial(client.check_context, protos, **fields),
                repeats=args.grpc_repeats // 3 or 1,
                min_seconds=0.0,
                max_seconds=args.grpc_max_seconds / 2,
            )
            again = pct(latencies, 50)
        except MemplaneError as error:
            first = time.perf_counter() - started
            text = " ".join(str(error).split())
            outcome = f"{type(error).__name__}: {text[:140]}"
        rows.append(
            [
                f"{k} x {unit.label}",
                tokens,
                len(messages),
                size / 1e6,
                100.0 * size / max_bytes,
                ms(first),
                ms(again),
                outcome,
            ]
        )
    ceiling = max_bytes / unit_bytes * unit.tokens
    print_table(
        f"Part 3. Request size ceiling: concatenated ~{unit.size:,}-token conversations in one CheckContext"
        f" (server limit {max_bytes:,} bytes = {max_bytes / 1e6:.1f} MB, about {ceiling / 1e6:.1f}M tokens"
        " of this workload)",
        ["request", "tokens", "messages", "MB", "% of limit", "first call ms", "p50 ms (after warm-up)", "outcome"],
        rows,
    )


async def over_grpc(args: argparse.Namespace, counter: TokenCounter, workloads: list[Workload]) -> None:
    """Parts 2 and 3 against a throw-away server."""
    async with bench_server() as stack:
        max_bytes = stack.app.settings.grpc.max_message_bytes
        service = stack.app.compaction.checker
        original = service.check_context
        server_times: list[float] = []

        async def timed_check(*a: Any, **kw: Any) -> tuple[ContextSplit, str]:
            started = time.perf_counter()
            try:
                return await original(*a, **kw)
            finally:
                server_times.append(time.perf_counter() - started)

        service.check_context = timed_check  # type: ignore[method-assign]
        async with (
            stack.client(timeout=args.timeout) as client,
            grpc.aio.insecure_channel(stack.target) as channel,
        ):
            health = health_pb2_grpc.HealthStub(channel)
            figures = [
                await measure_grpc(
                    stack, client, check_fn=sync_check, server_times=server_times, health=health, w=w, args=args
                )
                for w in workloads
            ]
            print_grpc(figures, max_bytes, args)
            if not args.no_limit_probe:
                unit = next((w for w in workloads if w.size == args.probe_unit), None)
                if unit is None:
                    unit = make_workload(args.probe_unit, args, counter, seed=args.seed)
                await limit_probe(client, counter, unit, max_bytes, args)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=7, help="random seed of the conversations")
    p.add_argument("--sizes", default="10000,100000,1000000", help="target tokens of each conversation")
    p.add_argument("--repeats", type=int, default=5, help="least timed runs per in-process figure")
    p.add_argument("--min-seconds", type=float, default=0.5, help="least seconds of runs per in-process figure")
    p.add_argument("--encoding", default=DEFAULT_ENCODING, help="token encoding")
    p.add_argument("--threshold", type=int, default=0, help="split threshold; 0 = half of each conversation")
    p.add_argument("--reserve", type=int, default=0, help="split reserve; 0 = a tenth of each, at most 10,000")
    p.add_argument("--no-in-process", action="store_true", help="skip part 1 (in-process tables)")
    p.add_argument("--no-grpc", action="store_true", help="skip parts 2 and 3 (no server is started)")
    p.add_argument("--no-limit-probe", action="store_true", help="skip part 3 (request size ceiling)")
    p.add_argument(
        "--plot",
        type=Path,
        help="also draw part 1's count + split p50 against tokens (log-log, with a linear guide) into this SVG or PNG",
    )
    p.add_argument("--grpc-repeats", type=int, default=10, help="least timed gRPC calls per size")
    p.add_argument("--grpc-min-seconds", type=float, default=2.0, help="least seconds of gRPC calls per size")
    p.add_argument("--grpc-max-seconds", type=float, default=20.0, help="no new gRPC call after this many seconds")
    p.add_argument("--path-repeats", type=int, default=3, help="least runs per request-path step")
    p.add_argument("--path-min-seconds", type=float, default=0.2, help="least seconds of runs per request-path step")
    p.add_argument("--timeout", type=float, default=120.0, help="client deadline per call, seconds")
    p.add_argument("--probe-unit", type=int, default=1_000_000, help="tokens of each conversation in the size probe")
    p.add_argument("--probe-max-k", type=int, default=8, help="most conversations concatenated in the size probe")
    return p.parse_args()


def plot(workloads: list[Workload], args: argparse.Namespace) -> None:
    """Part 1's CheckContext in process (count + split, p50 and best) against the
    conversation's tokens, log-log, with a line of slope 1 through the smallest p50."""
    from _plot import figure, save

    fig, axes = figure(1, width=5.5)
    tokens = [w.tokens for w in workloads]
    axes.plot(tokens, [ms(w.check_p50) for w in workloads], "o-", label="count + split, p50")
    axes.plot(tokens, [ms(w.check_best) for w in workloads], "s--", label="count + split, best", alpha=0.7)
    first = ms(workloads[0].check_p50)
    axes.plot(tokens, [first * t / tokens[0] for t in tokens], ":", color="grey", label="linear in tokens")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel(f"tokens of the conversation ({args.encoding})")
    axes.set_ylabel("ms, in process")
    axes.set_title("CheckContext's work (token counts and the split)")
    axes.legend()
    sizes = ",".join(str(w.size) for w in workloads)
    save(fig, args.plot, f"python bench/context_check.py --sizes {sizes} --no-grpc --plot {args.plot}")


def main() -> None:
    args = parse_args()
    if min(args.repeats, args.grpc_repeats, args.path_repeats) < 1:
        raise SystemExit("--repeats, --grpc-repeats and --path-repeats must be >= 1")
    sizes = [int(s) for s in args.sizes.split(",")]
    environment_banner("context_check", args)
    counter = token_counter(args.encoding)
    workloads = [make_workload(size, args, counter, seed=args.seed) for size in sizes]
    if not args.no_in_process:
        in_process(args, counter, workloads)
        if args.plot:
            plot(workloads, args)
    if not args.no_grpc:
        asyncio.run(over_grpc(args, counter, workloads))
    closing_banner()


if __name__ == "__main__":
    main()
