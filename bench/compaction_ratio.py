"""How much the extractive summariser compacts the longest LoCoMo conversation, and how
fast: in process (the algorithm alone) and through CompactMessages over real gRPC (as a
user meets it).

Data: every LoCoMo conversation (the file is read where it lives, never copied) is
turned into user `ContextMessage`s (name = speaker, id = dia_id, created_at = the
session's date-time, an image caption appended as LoCoMo's `Turn.content` does) and
counted (o200k_base, chat framing included); the one with the most tokens is used.

Part 1, in process (skip with --no-in-process): `ExtractiveSummarizer` (no model: it
  scores sentences by their words), language "en", at each --in-process-budgets value
  (default 2,000 only; part 2 covers every budget), --repeats times each (the median
  and the largest time printed; the first call of the process included).
Part 2, over gRPC (skip with --no-grpc): `bench_server()` (embedded PostgreSQL,
  build_app, the grpc.aio server on loopback, one workspace and key), then
  `AsyncMemplaneClient.compact_messages` with the same messages (domain -> proto with
  `message_to_proto`), summarizer = SUMMARIZER_CHOICE_EXTRACTIVE, language and
  encoding left empty (the server detects the language; the workspace default encoding
  is o200k_base), no scope (nothing is written to a transcript), client deadline
  --timeout seconds. One small CompactMessages first warms the server up (its
  time is logged). The server's embedding cache is off by default (--server-cache 0;
  until the lexical summariser every budget embedded every candidate sentence, and the
  cache would have let later budgets reuse the first one's vectors; the summariser now
  embeds nothing). While each call runs, a grpc health Check every 0.1 s on its
  own channel measures how responsive the server stays (client and server share one
  process and event loop, so a stall of either shows).

Part 1 also prints how many sentences the summariser scored (its candidates).

Part 1b, fact retention, in process (skip with --no-coverage, or with --no-in-process):
  every one of the 10 conversations is summarised whole at --coverage-budget (default
  2,000) with `ExtractiveSummarizer.summarize_with_sources`, which names the message
  (here the LoCoMo turn, by its dia_id) each bullet was taken from. Evidence coverage
  is the share of QA evidence turns (the distinct `Question.evidence` dia_ids of the
  questions of categories 1-4) that keep at least one sentence in the summary; the
  questions whose evidence kept at least one turn are counted too. Baselines at the
  same budget, over the same sentences the summariser splits (every sentence, as it
  scores them) and the same bullets, the whole text within the
  budget: lead (the first sentences, in order, until the next does not fit), uniform
  (the most sentences, evenly spaced through the conversation, that fit), random
  (shuffled with seeds 0, 1, 2, each added if it still fits; the mean of the three).
  Overall figures pool the turns (and questions) of all conversations; the time of
  each summary is printed beside its coverage (overall: the mean per summary).

Printed per budget: messages, input tokens (as the service counts them), summary
tokens, compaction ratio (input / summary tokens), bullets, ms (wall, client side
for gRPC), and for gRPC the method and language the reply reports, the health-check
latencies (ms) during the call and whether the summary equals the in-process one.
Then the first --show-lines lines of the summary at budget --show (the gRPC one when
part 2 ran).

History (2 shared cores): with the embedding summariser (multilingual-e5-small over the
400 longest sentences, centrality to their centroid times 1 + specificity, up to
ceac140) retention was 22.2 % and a summary of conv-43 took 5.7-6 s in process.

How long (2 shared cores, defaults): about 10 s for the server start, well under a
second per summary, under half a minute in all.

Run: `python bench/compaction_ratio.py [--budgets 500 2000 4000] [--in-process-budgets 2000] [--no-grpc]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
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
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memplane.domain.context import ContextMessage, TextBlock
from memplane.domain.models import MessageRole
from memplane.eval.locomo import SCORED_CATEGORIES, Conversation, load_locomo
from memplane.server.api.context_convert import message_to_proto
from memplane.server.compaction.extractive import (
    HEADINGS,
    ExtractiveSummarizer,
    _Candidate,  # the baselines use the summariser's own sentences and bullets
    _dedupe,
    _message_candidates,
    _render,
)
from memplane.server.settings import EmbeddingSettings
from memplane.text.tokens import TokenCounter, token_counter
from memplane.v1 import compaction_pb2

ENCODING = "o200k_base"
RANDOM_SEEDS = (0, 1, 2)
"""Seeds of the random baseline of part 1b."""
HEALTH_INTERVAL = 0.1
"""Seconds between health Checks while a compaction runs."""


def conversation_messages(conversation: Conversation) -> list[ContextMessage]:
    """Every turn as a user message named after its speaker, dated by its session."""
    return [
        ContextMessage(
            role=MessageRole.USER,
            blocks=(TextBlock(turn.content()),),
            name=turn.speaker,
            id=turn.dia_id,
            created_at=session.time,
        )
        for session in conversation.sessions
        for turn in session.turns
    ]


@dataclass
class Subject:
    """The conversation under test."""

    sample_id: str
    sessions: int
    messages: list[ContextMessage]
    tokens: int
    """Tokens of the messages (o200k_base, chat framing included)."""


def longest_by_tokens(conversations: Sequence[Conversation], counter: TokenCounter) -> Subject:
    """The conversation with the most tokens (logged with the runner-up by turns)."""
    subjects = [
        Subject(c.sample_id, len(c.sessions), msgs, sum(counter.count_messages(msgs)))
        for c in conversations
        for msgs in [conversation_messages(c)]
    ]
    subjects.sort(key=lambda s: s.tokens, reverse=True)
    by_turns = max(subjects, key=lambda s: len(s.messages))
    top = ", ".join(f"{s.sample_id} {s.tokens:,} tok / {len(s.messages)} turns" for s in subjects[:3])
    log(f"longest by tokens: {top}; longest by turns: {by_turns.sample_id} ({len(by_turns.messages)} turns)")
    return subjects[0]


def bullets_of(summary: str) -> int:
    """Number of bullet lines of a summary."""
    return sum(1 for line in summary.splitlines() if line.startswith("- "))


# -- part 1: in process --------------------------------------------------------------
async def in_process(args: argparse.Namespace, subject: Subject, counter: TokenCounter) -> dict[int, str]:
    """Summarise at every budget in process (--repeats times); print the table; return the summaries."""
    summarizer = ExtractiveSummarizer()
    candidates = len(_dedupe(_message_candidates(subject.messages)))
    rows: list[list[object]] = []
    summaries: dict[int, str] = {}
    for budget in args.in_process_budgets:
        seconds: list[float] = []
        summary = ""
        for _ in range(args.repeats):
            started = time.perf_counter()
            summary = await summarizer.summarize(
                subject.messages, previous_summary="", language="en", max_summary_tokens=budget, counter=counter
            )
            seconds.append(time.perf_counter() - started)
        summary_tokens = counter.count_text(summary)
        summaries[budget] = summary
        rows.append(
            [
                f"extractive @ {budget:,}",
                len(subject.messages),
                subject.tokens,
                summary_tokens,
                subject.tokens / max(summary_tokens, 1),
                bullets_of(summary),
                candidates,
                ms(pct(seconds, 50)),
                ms(max(seconds)),
            ]
        )
        log(f"in process, budget {budget:,}: {summary_tokens:,} tokens, p50 {pct(seconds, 50):.3f} s")

    print_table(
        f"Part 1. Extractive compaction of LoCoMo {subject.sample_id} in process ({ENCODING}, no model, λ = 0.7),"
        f" {args.repeats} runs per budget",
        [
            "summariser @ budget",
            "messages",
            "input tok",
            "summary tok",
            "ratio",
            "bullets",
            "sentences scored",
            "p50 ms",
            "max ms",
        ],
        rows,
    )
    return summaries


# -- part 1b: fact retention ---------------------------------------------------------
def evidence_turns(conversation: Conversation) -> set[str]:
    """The distinct evidence dia_ids of the questions of categories 1-4."""
    return {e for q in conversation.scored_questions(SCORED_CATEGORIES) for e in q.evidence}


class Coverage:
    """Evidence turns and questions kept, added up over conversations."""

    def __init__(self) -> None:
        self.turns = self.evidence = self.questions = self.scored = 0

    def add(self, conversation: Conversation, kept: set[str]) -> float:
        """Count the conversation's evidence turns (and questions) in *kept*; return its coverage."""
        evidence = evidence_turns(conversation)
        questions = conversation.scored_questions(SCORED_CATEGORIES)
        turns = len(evidence & kept)
        self.turns += turns
        self.evidence += len(evidence)
        self.questions += sum(1 for q in questions if kept.intersection(q.evidence))
        self.scored += len(questions)
        return turns / max(len(evidence), 1)

    @property
    def share(self) -> float:
        """Evidence turns kept / evidence turns."""
        return self.turns / max(self.evidence, 1)

    @property
    def question_share(self) -> float:
        """Questions with at least one evidence turn kept / questions."""
        return self.questions / max(self.scored, 1)


class Baselines:
    """Sentence choices without a model, over the summariser's own sentences and bullets,
    the rendered text within *budget* tokens."""

    def __init__(self, messages: Sequence[ContextMessage], counter: TokenCounter, budget: int) -> None:
        self.messages = messages
        self.sentences: list[_Candidate] = _dedupe(_message_candidates(messages))
        self.bullets = [c.bullet() for c in self.sentences]
        self.costs = counter.count_texts(["\n" + b for b in self.bullets])
        self.counter = counter
        self.budget = budget
        self.room = budget - counter.count_text(HEADINGS["en"])

    def kept(self, chosen: Sequence[int]) -> set[str]:
        """The dia_ids of the chosen sentences' turns."""
        return {self.messages[self.sentences[i].source].id for i in chosen}

    def _fits(self, chosen: Sequence[int]) -> bool:
        text = _render(HEADINGS["en"], [self.bullets[i] for i in sorted(chosen)])
        return self.counter.count_text(text) <= self.budget

    def _trim(self, chosen: list[int]) -> list[int]:
        while chosen and not self._fits(chosen):  # BPE counts are not exactly additive
            chosen.pop()
        return chosen

    def lead(self) -> list[int]:
        """The first sentences, in order, until the next does not fit."""
        chosen: list[int] = []
        used = 0
        for i, cost in enumerate(self.costs):
            if used + cost > self.room:
                break
            chosen.append(i)
            used += cost
        return self._trim(chosen)

    def uniform(self) -> list[int]:
        """The most sentences, evenly spaced through the conversation, that fit."""
        n = len(self.sentences)

        def spaced(k: int) -> list[int]:
            return sorted({int((j + 0.5) * n / k) for j in range(k)})

        low, high = 0, n  # the largest k whose spaced sentences fit (costs grow with k almost always)
        while low < high:
            k = (low + high + 1) // 2
            if sum(self.costs[i] for i in spaced(k)) <= self.room and self._fits(spaced(k)):
                low = k
            else:
                high = k - 1
        return spaced(low) if low else []

    def random(self, seed: int) -> list[int]:
        """Sentences in a random order (*seed*), each added while it still fits."""
        order = list(range(len(self.sentences)))
        random.Random(seed).shuffle(order)
        chosen: list[int] = []
        used = 0
        for i in order:
            if used + self.costs[i] <= self.room:
                chosen.append(i)
                used += self.costs[i]
        return self._trim(chosen)


async def fact_retention(
    args: argparse.Namespace, conversations: Sequence[Conversation], counter: TokenCounter
) -> None:
    """Evidence coverage of the extractive summary and of the baselines, per conversation
    and overall, beside the time of each summary; print the table."""
    summarizer = ExtractiveSummarizer()
    budget = args.coverage_budget
    names = ["extractive", "lead", "uniform", "random (mean of 3)"]
    totals = {name: Coverage() for name in names}
    random_runs = [Coverage() for _ in RANDOM_SEEDS]
    rows: list[list[object]] = []
    turns = sentences = bullets = 0
    seconds_total = 0.0
    for conversation in conversations:
        messages = conversation_messages(conversation)
        started = time.perf_counter()
        result = await summarizer.summarize_with_sources(
            messages, previous_summary="", language="en", max_summary_tokens=budget, counter=counter
        )
        seconds = time.perf_counter() - started
        base = Baselines(messages, counter, budget)
        extractive = totals["extractive"].add(conversation, {messages[i].id for i in result.sources if i >= 0})
        lead = totals["lead"].add(conversation, base.kept(base.lead()))
        uniform = totals["uniform"].add(conversation, base.kept(base.uniform()))
        randoms = [
            run.add(conversation, base.kept(base.random(seed)))
            for run, seed in zip(random_runs, RANDOM_SEEDS, strict=True)
        ]
        turns, sentences, bullets = (
            turns + len(messages),
            sentences + len(base.sentences),
            bullets + len(result.sources),
        )
        seconds_total += seconds
        rows.append(
            [
                conversation.sample_id,
                len(messages),
                len(base.sentences),
                len(evidence_turns(conversation)),
                len(result.sources),
                extractive,
                lead,
                uniform,
                sum(randoms) / len(randoms),
                ms(seconds),
            ]
        )
        log(f"coverage {conversation.sample_id}: extractive {extractive:.3f}, {seconds:.3f} s")
    random_share = sum(r.share for r in random_runs) / len(random_runs)
    random_questions = sum(r.question_share for r in random_runs) / len(random_runs)
    every = totals["extractive"]
    rows.append(
        [
            "overall (evidence turns)",
            turns,
            sentences,
            every.evidence,
            bullets,
            every.share,
            totals["lead"].share,
            totals["uniform"].share,
            random_share,
            ms(seconds_total / max(len(conversations), 1)),
        ]
    )
    rows.append(
        [
            "overall (questions, >= 1 turn)",
            "",
            "",
            every.scored,
            "",
            every.question_share,
            totals["lead"].question_share,
            totals["uniform"].question_share,
            random_questions,
            "",
        ]
    )
    print_table(
        f"Part 1b. Fact retention: share of LoCoMo QA evidence turns (categories 1-4) with a sentence in the"
        f" summary, every conversation summarised whole at {budget:,} tokens ({ENCODING}, no model);"
        " ms = time of the summary (overall: mean per summary)",
        [
            "conversation",
            "turns",
            "sentences",
            "evidence turns",
            "bullets",
            "extractive",
            "lead",
            "uniform",
            "random",
            "ms",
        ],
        rows,
    )


# -- part 2: over gRPC ---------------------------------------------------------------
async def health_probe(stub: health_pb2_grpc.HealthStub, stop: asyncio.Event, out: list[float]) -> None:
    """Append the latency (seconds) of a health Check every `HEALTH_INTERVAL` s until *stop*."""
    while not stop.is_set():
        started = time.perf_counter()
        await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
        out.append(time.perf_counter() - started)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), HEALTH_INTERVAL)


async def over_grpc(
    args: argparse.Namespace, subject: Subject, stack: Stack, reference: dict[int, str]
) -> dict[int, str]:
    """CompactMessages (extractive) at every budget over gRPC; print the table; return the summaries."""
    protos = [message_to_proto(m) for m in subject.messages]
    request_bytes = compaction_pb2.CompactMessagesRequest(messages=protos).ByteSize()
    extractive = compaction_pb2.SUMMARIZER_CHOICE_EXTRACTIVE
    rows: list[list[object]] = []
    summaries: dict[int, str] = {}
    async with stack.client(timeout=args.timeout) as client, grpc.aio.insecure_channel(stack.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        idle: list[float] = []
        for _ in range(20):
            started = time.perf_counter()
            await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
            idle.append(time.perf_counter() - started)
        started = time.perf_counter()
        await client.compact_messages(protos[:10], summarizer=extractive, max_summary_tokens=200)
        log(
            f"server warm-up (CompactMessages of 10 messages) {time.perf_counter() - started:.2f} s;"
            f" idle health Check p50 {ms(pct(idle, 50)):.2f} ms; request of {subject.tokens:,} tokens"
            f" = {request_bytes / 1e6:.2f} MB"
        )
        for budget in args.budgets:
            stop = asyncio.Event()
            checks: list[float] = []
            probe = asyncio.create_task(health_probe(health, stop, checks))
            started = time.perf_counter()
            try:
                result = await client.compact_messages(protos, summarizer=extractive, max_summary_tokens=budget)
            finally:
                seconds = time.perf_counter() - started
                stop.set()
                await probe
            summaries[budget] = result.summary
            same = "-" if budget not in reference else "yes" if reference[budget] == result.summary else "NO"
            rows.append(
                [
                    f"extractive @ {budget:,}",
                    len(protos),
                    result.input_tokens,
                    result.summary_tokens,
                    result.input_tokens / max(result.summary_tokens, 1),
                    compaction_pb2.SummaryMethod.Name(result.method).removeprefix("SUMMARY_METHOD_"),
                    "yes" if result.compacted else f"NO ({result.failure})",
                    result.language,
                    bullets_of(result.summary),
                    ms(seconds),
                    len(checks),
                    ms(pct(checks, 50)),
                    ms(max(checks, default=float("nan"))),
                    same,
                ]
            )
            log(f"gRPC, budget {budget:,}: {result.summary_tokens:,} tokens, {seconds:.2f} s")

    print_table(
        f"Part 2. CompactMessages over gRPC (loopback, AsyncMemplaneClient, summarizer EXTRACTIVE), LoCoMo"
        f" {subject.sample_id}, request {request_bytes / 1e6:.2f} MB; server embedding cache {args.server_cache:,};"
        f" idle health Check p50 {ms(pct(idle, 50)):.2f} ms",
        [
            "summariser @ budget",
            "messages",
            "input tok",
            "summary tok",
            "ratio",
            "method",
            "compacted",
            "lang",
            "bullets",
            "ms",
            "health checks",
            "health p50 ms",
            "health max ms",
            "= in-process",
        ],
        rows,
    )
    return summaries


async def main(args: argparse.Namespace) -> None:
    environment_banner("compaction_ratio", args)
    counter = token_counter(ENCODING)
    conversations = load_locomo(args.locomo)
    subject = longest_by_tokens(conversations, counter)
    log(f"{subject.sample_id}: {len(subject.messages)} turns in {subject.sessions} sessions, {subject.tokens:,} tokens")

    summaries: dict[int, str] = {}
    source = "in process"
    if not args.no_in_process:
        summaries = await in_process(args, subject, counter)
        if not args.no_coverage:
            await fact_retention(args, conversations, counter)
    if not args.no_grpc:
        async with bench_server(embedding=EmbeddingSettings(cache_size=args.server_cache)) as stack:
            reference = summaries
            summaries = await over_grpc(args, subject, stack, reference)
            source = "over gRPC"
    shown = summaries.get(args.show, "")
    if shown:
        lines = shown.splitlines()
        print(f"\n# summary at budget {args.show:,} ({source}), first {args.show_lines} of {len(lines)} lines:")
        print("\n".join(lines[: args.show_lines]))
    closing_banner()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--budgets", type=int, nargs="+", default=[500, 2_000, 4_000], help="max_summary_tokens")
    parser.add_argument(
        "--in-process-budgets", type=int, nargs="+", default=[2_000], help="max_summary_tokens of part 1"
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs of each in-process budget (part 1)")
    parser.add_argument("--show", type=int, default=2_000, help="print the summary made at this budget")
    parser.add_argument("--show-lines", type=int, default=12, help="lines of it to print (the heading included)")
    parser.add_argument("--no-in-process", action="store_true", help="skip part 1 (in process)")
    parser.add_argument("--no-coverage", action="store_true", help="skip part 1b (fact retention)")
    parser.add_argument("--coverage-budget", type=int, default=2_000, help="max_summary_tokens of part 1b")
    parser.add_argument("--no-grpc", action="store_true", help="skip part 2 (no server is started)")
    parser.add_argument("--timeout", type=float, default=300.0, help="client deadline per call, seconds")
    parser.add_argument(
        "--server-cache", type=int, default=0, help="the server's embedding cache size (0 = off; its default 10,000)"
    )
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
