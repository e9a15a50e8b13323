"""PrepareContext, the pre-reasoning hook an agent calls before every model call, without
an LLM: time per call over real gRPC, and how much of LoCoMo's QA evidence the summary
keeps.

Server: `bench_server()` (embedded PostgreSQL, build_app, the grpc.aio server on
loopback, one workspace and key), no LLM, the server's embedding cache --server-cache
(default 0: every call is a first call, as a new user's is; 10,000 is the server
default). Every call: `AsyncMemplaneClient.prepare_context` with summarizer
SUMMARIZER_CHOICE_EXTRACTIVE, a one-line system prompt, no previous summary, the
window (`max_input_tokens`) of the scenario and every other knob the server default
(ratio 0.7, reserve and summary budget derived from the window, tool-output limits
100 KB / 3 KB), scope user "bench" and a session id of its own per call (so the
compacted span is recorded in a fresh transcript, as a new session's would be),
`write_memories` as --write-memories. Messages are built as domain `ContextMessage`s
and sent with `message_to_proto` (built outside the timing).

Scenarios (LoCoMo is read where it lives, never copied):
  (a) chat60+tool: 60 messages at an 8,000-token window. 58 alternate user / assistant
      messages, each two consecutive LoCoMo turns (of the conversation whose number is
      the call number, so every call sends other text), then an assistant tool call and
      its 7.6 KB output (a JSON list of search hits made from LoCoMo sentences, 7,500 to
      7,600 bytes): the newest message, so it is under the 100 KB limit and sent whole.
  (b) locomo-longest: the LoCoMo conversation with the most tokens (conv-43, 680 turns,
      ~25k o200k tokens) as user messages named after the speakers and dated by the
      session, at a 32,000-token window: the default summary budget is then 2,000
      tokens, the budget of bench/compaction_ratio.py's retention figure.
  (c) agent-128k: a synthetic agent conversation of ~110k tokens
      (`context_check.build_conversation`, seed --seed + call number: questions, tool
      calls, grep / file / shell / search outputs, answers) at a 128,000-token window.
  (d) locomo-128k: whole LoCoMo conversations in file order (starting at the call
      number) until at least 110k tokens (120k-133k), as in (b), at a 128,000-token
      window.

Printed per scenario: messages, tokens, request MB, the split (messages compacted /
kept), summary tokens, method, the client-side time of the first call, p50 and max ms of
the --calls calls, the CPU time of the process per call (p50: client and server share
the process, so it includes the client's request encoding and reply decoding, and the
database's own work is not in it; on a shared machine it is steadier than wall time),
the server's summariser share (MessageCompactor.compact_messages
wrapped with a timer, p50 ms), and for LoCoMo scenarios the share of QA evidence turns
(categories 1-4) in the compacted span that keep a sentence in the summary (a bullet
is traced back to its turn by its sentence). Load average printed at start and end.

How long (2 shared cores): server start ~2 s, then 0.05-1 s per call, about 20 s in all
with the defaults. On ceac140 (the embedding summariser, this bench copied there) a call
took 11 s in (a), 23 s in (b), 25-27 s in (c) and (d).

Run: `python bench/prepare_context.py [--calls 5] [--scenarios a b c d] [--server-cache 0]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from _harness import Stack, bench_server, closing_banner, common_args, environment_banner, log, ms, pct, print_table
from compaction_ratio import conversation_messages, evidence_turns
from context_check import build_conversation

from memplane.domain.context import ContextMessage, TextBlock, ToolResultBlock, ToolUseBlock
from memplane.domain.models import MessageRole
from memplane.eval.locomo import Conversation, load_locomo
from memplane.server.api.context_convert import message_to_proto
from memplane.server.compaction.sentences import split_sentences
from memplane.server.settings import EmbeddingSettings
from memplane.text.tokens import TokenCounter, token_counter
from memplane.v1 import compaction_pb2, memory_pb2

ENCODING = "o200k_base"
SYSTEM_PROMPT = "You are a helpful assistant with long-term memory."
TOOL_OUTPUT_BYTES = 7_600
"""Size of (a)'s tool output, UTF-8 bytes."""
LONG_TOKENS = 110_000
"""Tokens of the (c) and (d) conversations: over the 85,120-token threshold of a 128k window."""
_BULLET = re.compile(r"^- (?:\[[^\]]*\] )?(?P<text>.+)$")


@dataclass
class Call:
    """One request of a scenario: its messages and, for LoCoMo, the evidence turns it holds."""

    messages: list[ContextMessage]
    evidence: set[str] = field(default_factory=set)
    """Message ids that are QA evidence (categories 1-4)."""


@dataclass
class Scenario:
    """A workload: a name, a window and a builder of the i-th call."""

    key: str
    name: str
    window: int
    build: Callable[[int], Call]


# -- workloads -------------------------------------------------------------------------
def chat_with_tool(conversations: Sequence[Conversation], first: int, index: int) -> Call:
    """(a): 58 chat messages of two LoCoMo turns each, a tool call and its 7.6 KB output."""
    conversation = conversations[(first + index) % len(conversations)]
    turns = [t for s in conversation.sessions for t in s.turns]
    messages: list[ContextMessage] = []
    for i in range(58):
        pair = turns[(2 * i) % len(turns) : (2 * i) % len(turns) + 2]
        role = MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT
        messages.append(ContextMessage(role, (TextBlock(" ".join(t.content() for t in pair)),), id=f"m{i}"))
    call_id = f"call_{index:04d}"
    query = json.dumps({"query": "what did they talk about", "top_k": 40})
    messages.append(ContextMessage(MessageRole.ASSISTANT, (ToolUseBlock(call_id, "search", query),), id="m58"))
    hits: list[dict[str, Any]] = []
    sentences = [t.content() for t in reversed(turns)]
    while len(json.dumps(hits, indent=2).encode()) < TOOL_OUTPUT_BYTES:
        text = sentences[len(hits) % len(sentences)]
        hits.append({"rank": len(hits) + 1, "title": text[:40], "snippet": text})
    output = json.dumps(hits, indent=2)
    while len(output.encode()) > TOOL_OUTPUT_BYTES:  # trim the last hit down to 7.6 KB
        over = len(output.encode()) - TOOL_OUTPUT_BYTES
        if len(hits[-1]["snippet"]) > over:
            hits[-1]["snippet"] = hits[-1]["snippet"][: -max(over, 1)]
        else:  # a short last hit (an image caption, "Bye!"): drop it, the output stays just under
            hits.pop()
        output = json.dumps(hits, indent=2)
    block = ToolResultBlock(call_id, output, "search")
    messages.append(ContextMessage(MessageRole.TOOL, (block,), id="m59"))
    return Call(messages)


def locomo_call(conversations: Sequence[Conversation], counter: TokenCounter, tokens: int, start: int) -> Call:
    """LoCoMo conversations from *start* (file order, wrapping) until *tokens* tokens, as
    user messages (ids prefixed by the sample id when more than one conversation)."""
    messages: list[ContextMessage] = []
    evidence: set[str] = set()
    used = 0
    for k in range(len(conversations)):
        conversation = conversations[(start + k) % len(conversations)]
        part = conversation_messages(conversation)
        prefix = f"{conversation.sample_id}/" if tokens > 0 else ""
        messages.extend(_with_id(m, prefix + m.id) for m in part)
        evidence |= {prefix + e for e in evidence_turns(conversation)}
        used += sum(counter.count_messages(part))
        if used >= tokens:
            break
    return Call(messages, evidence)


def _with_id(message: ContextMessage, new_id: str) -> ContextMessage:
    return ContextMessage(message.role, message.blocks, name=message.name, id=new_id, created_at=message.created_at)


def longest(conversations: Sequence[Conversation], counter: TokenCounter) -> int:
    """Index of the conversation with the most tokens."""
    sizes = [sum(counter.count_messages(conversation_messages(c))) for c in conversations]
    return max(range(len(sizes)), key=sizes.__getitem__)


def scenarios(args: argparse.Namespace, conversations: Sequence[Conversation], counter: TokenCounter) -> list[Scenario]:
    """The scenarios chosen by --scenarios."""
    top = longest(conversations, counter)
    every = [
        Scenario("a", "(a) 60 msgs + 7.6 KB tool output", 8_000, lambda i: chat_with_tool(conversations, 0, i)),
        Scenario(
            "b",
            f"(b) {conversations[top].sample_id} whole",
            32_000,
            lambda i: locomo_call([conversations[top]], counter, 0, 0),
        ),
        Scenario(
            "c", "(c) agent ~110k tok", 128_000, lambda i: Call(build_conversation(LONG_TOKENS, seed=args.seed + i))
        ),
        Scenario("d", "(d) LoCoMo ~110k tok", 128_000, lambda i: locomo_call(conversations, counter, LONG_TOKENS, i)),
    ]
    return [s for s in every if s.key in args.scenarios]


# -- evidence kept -----------------------------------------------------------------------
def evidence_kept(call: Call, compacted: int, summary: str) -> tuple[int, int]:
    """(evidence turns of the first *compacted* messages with a sentence in *summary*,
    evidence turns among them): each bullet is traced to the turns holding its sentence."""
    older = call.messages[:compacted]
    wanted = {m.id for m in older} & call.evidence
    where: dict[str, set[str]] = {}
    for m in older:
        for sentence in split_sentences(m.text(), min_words=1, min_ideographs=1):
            where.setdefault(sentence, set()).add(m.id)
    kept: set[str] = set()
    for line in summary.splitlines():
        match = _BULLET.match(line)
        if match is not None:
            kept |= where.get(match["text"], set())
    return len(kept & wanted), len(wanted)


# -- the calls --------------------------------------------------------------------------
async def run(args: argparse.Namespace, stack: Stack, todo: Sequence[Scenario], counter: TokenCounter) -> None:
    """Every scenario's calls, one after the other; print the table."""
    service = stack.app.compaction.compactor
    inner = service.compact_messages
    summarising: list[float] = []

    async def timed(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return await inner(*a, **k)
        finally:
            summarising.append(time.perf_counter() - started)

    service.compact_messages = timed  # type: ignore[method-assign]  # the server's summariser share
    rows: list[list[object]] = []
    async with stack.client(timeout=args.timeout) as client:
        started = time.perf_counter()
        warm = chat_with_tool(load_locomo(args.locomo, limit=1), 0, 99)
        await client.prepare_context(
            [message_to_proto(m) for m in warm.messages],
            max_input_tokens=2_000,
            summarizer=compaction_pb2.SUMMARIZER_CHOICE_EXTRACTIVE,
        )
        log(f"server warm-up (one PrepareContext at a 2,000-token window) {time.perf_counter() - started:.2f} s")
        for scenario in todo:
            seconds: list[float] = []
            cpu: list[float] = []
            summarising.clear()
            kept = wanted = 0
            reply = compaction_pb2.PrepareContextResponse()
            call = Call([])
            for i in range(args.calls):
                call = scenario.build(i)
                protos = [message_to_proto(m) for m in call.messages]
                scope = memory_pb2.Scope(user_id="bench", session_id=f"{scenario.key}-{i}-{time.time_ns()}")
                started, cpu_started = time.perf_counter(), time.process_time()
                reply = await client.prepare_context(
                    protos,
                    system_prompt=SYSTEM_PROMPT,
                    max_input_tokens=scenario.window,
                    summarizer=compaction_pb2.SUMMARIZER_CHOICE_EXTRACTIVE,
                    scope=scope,
                    write_memories=args.write_memories,
                )
                seconds.append(time.perf_counter() - started)
                cpu.append(time.process_time() - cpu_started)
                done = reply.compaction.compacted_message_count
                k, w = evidence_kept(call, done, reply.summary) if call.evidence else (0, 0)
                kept, wanted = kept + k, wanted + w
                log(f"{scenario.name} call {i + 1}: {seconds[-1]:.2f} s, {done} compacted, {len(reply.messages)} kept")
            tokens = sum(counter.count_messages(call.messages))
            request = compaction_pb2.PrepareContextRequest(messages=[message_to_proto(m) for m in call.messages])
            rows.append(
                [
                    scenario.name,
                    f"{scenario.window:,}",
                    len(call.messages),
                    tokens,
                    request.ByteSize() / 1e6,
                    reply.compaction.compacted_message_count,
                    len(reply.messages),
                    reply.compaction.summary_tokens,
                    compaction_pb2.SummaryMethod.Name(reply.compaction.method).removeprefix("SUMMARY_METHOD_"),
                    ms(seconds[0]),
                    ms(pct(seconds, 50)),
                    ms(max(seconds)),
                    ms(pct(cpu, 50)),
                    ms(pct(summarising, 50)),
                    f"{kept / wanted:.3f} ({kept}/{wanted})" if wanted else "-",
                ]
            )
    print_table(
        f"PrepareContext over gRPC (loopback, summarizer EXTRACTIVE, no LLM, {ENCODING}), {args.calls} calls per"
        f" scenario (last call's sizes), server embedding cache {args.server_cache:,},"
        f" write_memories {args.write_memories}",
        [
            "scenario",
            "window",
            "messages",
            "tokens",
            "MB",
            "compacted",
            "kept",
            "summary tok",
            "method",
            "first ms",
            "p50 ms",
            "max ms",
            "cpu p50 ms",
            "summariser p50 ms",
            "evidence kept",
        ],
        rows,
    )


async def main(args: argparse.Namespace) -> None:
    environment_banner("prepare_context", args)
    counter = token_counter(ENCODING)
    conversations = load_locomo(args.locomo)
    todo = scenarios(args, conversations, counter)
    async with bench_server(embedding=EmbeddingSettings(cache_size=args.server_cache)) as stack:
        await run(args, stack, todo, counter)
    closing_banner()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--calls", type=int, default=5, help="calls per scenario")
    parser.add_argument("--scenarios", nargs="+", default=["a", "b", "c", "d"], choices=["a", "b", "c", "d"])
    parser.add_argument("--server-cache", type=int, default=0, help="the server's embedding cache (0 = off)")
    parser.add_argument("--write-memories", action="store_true", help="PrepareContext with write_memories")
    parser.add_argument("--timeout", type=float, default=300.0, help="client deadline per call, seconds")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
