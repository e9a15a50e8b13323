"""CheckContext's CPU cost in process: token counting and the compact/keep split.

What it measures (no server, no database: the two pure steps CheckContext runs)
  1. `TokenCounter.count_messages` (quicktok, o200k_base by default, OpenAI cookbook
     framing) over a whole conversation;
  2. `split_context` on those counts (ReMe's check_context rules: reserve walk, current
     user turn, tool_use/tool_result and user/assistant pairs);
  3. both, as the service runs them per call;
  at ~10k, ~100k and ~1M tokens. Each figure is the median and the best (milliseconds)
  of at least --repeats runs and at least --min-seconds of runs (small sizes run many
  times: single sub-millisecond runs are noisy on a shared box), after one warm-up
  run, with the garbage collector off while timing (as `timeit` does). The growth
  ratios time(100k)/time(10k) and time(1M)/time(100k) show the scaling: ~10 is linear
  (the token ratio is printed beside them, the conversations being only about 10x
  apart). Last, plain counting throughput: `count_text` on one big string (the 1M
  conversation's text) and `count_texts` on its per-message texts as one batch.

Workload: `build_conversation` — synthetic but agent-shaped turns from a fixed seed: a
  user question; 0 to 8 tool rounds (an assistant message with an optional one-line
  preamble and 1-3 parallel tool_use blocks, one tool message per call with a
  multi-line output: grep hits, file excerpts, shell logs, search results as JSON; a
  few lines mostly, now and then a hundred); then the assistant's answer in 1-3
  paragraphs; about 100 tokens per message on average (~10,000 messages per 1M). It
  ends with the user's new question. Text is random words from a fixed vocabulary
  plus paths, numbers and identifiers; tool call ids are unique.
  Import it (`from context_check import build_conversation`) to replay the same
  workload over gRPC.

Split settings: --threshold 0 means half of each conversation (so every size is
  compacted) and --reserve 0 a tenth of it, at most 10,000 tokens (ReMe's reserve).

How long (2 cores, defaults): ~10 s.

    python bench/context_check.py [--sizes 10000,100000,1000000] [--repeats 5] [--min-seconds 0.5]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from _harness import closing_banner, environment_banner, log, ms, print_table

from memplane.compaction.split import split_context
from memplane.compaction.tokens import DEFAULT_ENCODING, TokenCounter, token_counter
from memplane.domain.context import Block, ContextMessage, ContextSplit, TextBlock, ToolResultBlock, ToolUseBlock
from memplane.domain.models import MessageRole

T = TypeVar("T")

REME_RESERVE = 10_000
MAX_RUNS = 10_000

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


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=7, help="random seed of the conversations")
    p.add_argument("--sizes", default="10000,100000,1000000", help="target tokens of each conversation")
    p.add_argument("--repeats", type=int, default=5, help="least timed runs per figure (median and best reported)")
    p.add_argument("--min-seconds", type=float, default=0.5, help="least time of the timed runs of each figure")
    p.add_argument("--encoding", default=DEFAULT_ENCODING, help="token encoding")
    p.add_argument("--threshold", type=int, default=0, help="split threshold; 0 = half of each conversation")
    p.add_argument("--reserve", type=int, default=0, help="split reserve; 0 = a tenth of each, at most 10,000")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    sizes = [int(s) for s in args.sizes.split(",")]
    environment_banner("context_check", args)
    counter = token_counter(args.encoding)

    rows: list[list[object]] = []
    times: list[tuple[int, float, float, float, float, float, float]] = []  # tokens, p50 and best of each step
    biggest: list[ContextMessage] = []
    for size in sizes:
        started = time.perf_counter()
        messages = build_conversation(size, seed=args.seed, encoding=args.encoding)
        log(f"built ~{size:,} tokens: {len(messages):,} messages in {time.perf_counter() - started:.1f} s")
        counts = counter.count_messages(messages)
        tokens = sum(counts)
        threshold = args.threshold or tokens // 2
        reserve = args.reserve or min(REME_RESERVE, tokens // 10)
        calls = sum(len(m.tool_use_ids()) for m in messages)

        count_med, count_best, _ = timed(
            functools.partial(counter.count_messages, messages), args.repeats, args.min_seconds
        )
        split_med, split_best, split = timed(
            functools.partial(
                split_context,
                messages,
                counts,
                system_prompt_tokens=0,
                previous_summary_tokens=0,
                threshold_tokens=threshold,
                reserve_tokens=reserve,
            ),
            args.repeats,
            args.min_seconds,
        )
        both_med, both_best, both = timed(
            functools.partial(check, counter, messages, threshold, reserve), args.repeats, args.min_seconds
        )
        if both != split:
            raise SystemExit("count + split disagrees with split on the same counts")
        rows.append(
            [
                f"~{size:,}",
                tokens,
                len(messages),
                calls,
                ms(count_med),
                ms(count_best),
                tokens / count_best / 1e6,
                ms(split_med),
                ms(split_best),
                ms(both_med),
                ms(both_best),
                f"{split.keep_from:,} ({split.kept_tokens:,} tok)",
                "yes" if split.valid else "NO",
            ]
        )
        times.append((tokens, count_med, split_med, both_med, count_best, split_best, both_best))
        biggest = messages

    print_table(
        f"CheckContext steps in process, {args.encoding}: median (p50) and best, ms"
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
    for before, after, size0, size1 in zip(times, times[1:], sizes, sizes[1:], strict=False):
        growth.append([f"~{size1:,} / ~{size0:,}", *(a / b for a, b in zip(after, before, strict=True))])
    if growth:
        print_table(
            "Growth of the times (linear = the token ratio, ~10)",
            ["sizes", "token ratio", "count p50", "split p50", "both p50", "count best", "split best", "both best"],
            growth,
        )

    big_text = "\n".join(m.text() for m in biggest)
    texts = [m.text() for m in biggest]
    text_med, text_best, text_tokens = timed(lambda: counter.count_text(big_text), args.repeats, args.min_seconds)
    batch_med, batch_best, batch_counts = timed(lambda: counter.count_texts(texts), args.repeats, args.min_seconds)
    batch_tokens = sum(batch_counts)
    print_table(
        f"Plain counting throughput ({args.encoding}), the largest conversation's text",
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
    closing_banner()


if __name__ == "__main__":
    main()
