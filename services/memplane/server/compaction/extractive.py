"""The summariser used without an LLM: sentences selected from the messages, not written.

1. Split every message into sentences (`compaction.sentences`: English `.!?` followed
   by a space, the Chinese full-width full stop, exclamation and question marks U+3002 /
   U+FF01 / U+FF1F, and newlines), each kept with its speaker (name, else role) and its
   day.
   Fragments under 3 words (or 4 ideographs) are dropped; tool calls are skipped and a
   tool output contributes only its first non-empty line. Exact repeats are kept once.
2. Incremental compaction (as ReMe's compact_memory updates its running summary): the
   bullet lines of the previous summary are candidates too, placed before the new
   sentences, so the running summary stays within its budget and keeps the old facts
   that are still central.
3. Score every candidate by specificity, with no model call: the mean over its words of
   their inverse document frequency among the span's own sentences, `log(N / df) /
   log(N)` in [0, 1] (Spärck Jones, "A statistical interpretation of term specificity
   and its application in retrieval", J. Documentation 1972), a number or a capitalised
   word other than the first (a proper noun; "I" excepted) counting 1; each ideograph is
   a word (`compaction.lexical`). Specific sentences carry the names, dates, places and
   numbers that a later question asks for; generic chat lines ("Have a great time and
   learn a lot.") score low.
4. Select greedily by Maximal Marginal Relevance (Carbonell & Goldstein, SIGIR 1998) over
   tf-idf vectors of the candidates, MMR's own sentence representation:
   `λ·specificity - (1-λ)·max cosine to the sentences already chosen`, λ = 0.7; a
   candidate within cosine 0.95 of a chosen one (the same words) is a near-duplicate and
   never chosen. Sentences under 8 words (10 ideographs) come only after every longer
   one, MEAD's length cut-off (Radev, Jing, Stys & Tam, "Centroid-based summarization
   of multiple documents", 2004): in chat the most central lines are otherwise phatic
   ("Tell me more!"). A candidate whose bullet no longer fits the token budget is
   passed over; selection ends when none fits.
5. Output the chosen sentences in their original order, as Markdown that says plainly
   it is extractive: a heading, then `- [Speaker, YYYY-MM-DD] sentence` bullets.

Why no embeddings: up to ceac140 the summariser embedded the 400 longest candidates with
the local model (multilingual-e5-small, ~40 sentences/s on 2 CPUs) and ranked them by
cosine to their centroid (LexRank's centrality, Erkan & Radev, JAIR 2004) times
`1 + specificity`, with MMR over those vectors. That kept 22.2 % of LoCoMo's QA evidence
turns (bench/compaction_ratio.py: every conversation summarised whole at 2,000 tokens)
at 5.7-17 s per summary of the longest conversation, and a PrepareContext at a
128k-token window took 22-27 s. Specificity alone with MMR over tf-idf vectors keeps
21.6 % over the 400 longest sentences and 22.9 % over every sentence (33.5 % of the
questions keep an evidence turn, 32.9 % before), in 0.1-0.3 s per conversation, and
makes no model call: no embedding quota is charged and the summary is deterministic.
The cap on candidates (`MAX_CANDIDATES`) now only bounds a huge span.

Cost: linear in the span's words. A 128k-token span of LoCoMo turns (3,000 messages,
8,000 sentences) takes about 0.35 s of CPU, most of it splitting sentences and giving
words their ids; spans over `OFFLOAD_CHARS` characters run in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC

import numpy as np

from memplane.domain.context import ContextMessage, TextBlock, ToolResultBlock
from memplane.server.compaction.lexical import SpanWords, TfIdfVectors, words
from memplane.server.compaction.sentences import MIN_IDEOGRAPHS, MIN_WORDS, cap, long_enough, split_sentences
from memplane.server.compaction.summary import substantive
from memplane.text.language import Language
from memplane.text.tokens import TokenCounter

_log = logging.getLogger(__name__)

HEADINGS: dict[Language, str] = {
    "en": "## Extractive summary (no LLM): selected sentences",
    "zh": "## 摘录式摘要（无 LLM）：原文选句",  # noqa: RUF001 - full-width punctuation is Chinese typography
}
"""First line of an extractive summary per language."""

MMR_LAMBDA = 0.7
"""Weight of relevance against redundancy in MMR (Carbonell & Goldstein 1998)."""
NEAR_DUPLICATE_COSINE = 0.95
"""A candidate at least this close (cosine) to a chosen sentence is never chosen."""
PREFERRED_WORDS = 8
"""Sentences of fewer words (and fewer than `PREFERRED_IDEOGRAPHS` ideographs) are chosen
only once no longer one fits: MEAD's sentence-length cut-off (Radev et al. 2004), which
keeps phatic lines ("Tell me more!") out of the summary of a chatty conversation."""
PREFERRED_IDEOGRAPHS = 10
"""Chinese counterpart of `PREFERRED_WORDS`, in ideographs."""
MAX_CANDIDATES = 5_000
"""Most sentences scored for one summary, previous-summary items included (at most half
of them); beyond it the longest are kept (MEAD's length feature: long sentences carry the
facts). Every LoCoMo conversation (at most 1,900 sentences) fits whole; a span of a
128k-token window of agent work holds about 4,000 (bench/prepare_context.py)."""
OFFLOAD_CHARS = 20_000
"""Spans with more characters of text than this (about 5,000 tokens) are split and scored
in a worker thread, so the event loop keeps serving other calls meanwhile."""

_BULLET = re.compile(r"^\s*[-*+•]\s+(.*\S)\s*$")
_TAGGED = re.compile(r"^\[(?P<speaker>[^\],]+)(?:,\s*(?P<day>\d{4}-\d{2}-\d{2}))?\]\s+(?P<text>.+)$")


@dataclass(frozen=True)
class ExtractiveSummary:
    """An extractive summary with where its bullets came from."""

    text: str
    """The summary, as `ExtractiveSummarizer.summarize` returns it."""
    sources: tuple[int, ...]
    """Per bullet, in output order: the index in the summarised messages of the message
    the sentence was taken from, or -1 for an item of the previous summary."""


@dataclass(frozen=True)
class _Candidate:
    speaker: str
    day: str
    text: str
    source: int = -1
    """Index of the message it came from; -1 for a previous-summary item."""

    def bullet(self) -> str:
        if not self.speaker:
            return f"- {self.text}"
        tag = f"{self.speaker}, {self.day}" if self.day else self.speaker
        return f"- [{tag}] {self.text}"


class ExtractiveSummarizer:
    """Summaries without an LLM: specific, mutually diverse sentences under a token
    budget, chosen without any model call (no embedding quota is charged)."""

    async def summarize(
        self,
        messages: Sequence[ContextMessage],
        *,
        previous_summary: str,
        language: Language,
        max_summary_tokens: int,
        counter: TokenCounter,
    ) -> str:
        """An extractive summary of *messages* (oldest first) and of the bullet lines of
        *previous_summary*: the heading of *language* then `- [Speaker, YYYY-MM-DD]
        sentence` lines in their original order (previous summary first), at most
        *max_summary_tokens* tokens as counted by *counter* for the whole text. Only
        when the budget is smaller than the heading (about 15 tokens) is the result the
        heading alone, over budget. When every line is a fragment under 3 words, the
        fragments are the candidates (a summary is never empty while messages have text).

        Cost: linear in the words of the span (splitting, counting the candidates'
        tokens, tf-idf), plus the posting lists of each chosen sentence's words for the
        selection: about 0.1 s of CPU for a LoCoMo conversation (25k tokens), 0.35 s for
        a 128k-token span; spans over `OFFLOAD_CHARS` characters of text run in a worker
        thread. No model call; deterministic: the same input gives the same summary.
        Raises nothing of its own (a bug would surface as the exception it is).
        """
        result = await self.summarize_with_sources(
            messages,
            previous_summary=previous_summary,
            language=language,
            max_summary_tokens=max_summary_tokens,
            counter=counter,
        )
        return result.text

    async def summarize_with_sources(
        self,
        messages: Sequence[ContextMessage],
        *,
        previous_summary: str,
        language: Language,
        max_summary_tokens: int,
        counter: TokenCounter,
    ) -> ExtractiveSummary:
        """`summarize`, with the source message of every bullet (for evaluation: which
        turns survive compaction)."""
        started = time.perf_counter()
        args = (messages, previous_summary, HEADINGS[language], max_summary_tokens, counter)
        if _span_chars(messages) + len(previous_summary) > OFFLOAD_CHARS:
            result, scored = await asyncio.to_thread(_summarize, *args)
        else:
            result, scored = _summarize(*args)
        _log.debug(
            "extractive summary: %d messages, %d candidates, %d chosen, %.3f s",
            len(messages),
            scored,
            len(result.sources),
            time.perf_counter() - started,
        )
        return result


def _span_chars(messages: Sequence[ContextMessage]) -> int:
    """Characters of the text blocks of *messages* (what the summariser splits)."""
    return sum(len(b.text) for m in messages for b in m.blocks if isinstance(b, TextBlock))


def _summarize(
    messages: Sequence[ContextMessage],
    previous_summary: str,
    heading: str,
    max_summary_tokens: int,
    counter: TokenCounter,
) -> tuple[ExtractiveSummary, int]:
    """The summary (steps 1 to 5 of the module docstring) and how many candidates were scored."""
    cache = _WordCache()
    every_previous = _previous_candidates(previous_summary)
    every_new = _message_candidates(messages, words_of=cache.words)
    previous = _longest(every_previous, MAX_CANDIDATES // 2, cache)
    candidates = _dedupe(previous + _longest(every_new, MAX_CANDIDATES - len(previous), cache))
    corpus = _dedupe(every_previous + every_new)
    if not candidates:  # only short lines ("ok", "do it"): keep them rather than nothing
        every_new = _message_candidates(messages, min_words=1, min_ideographs=1, words_of=cache.words)
        candidates = corpus = _dedupe(_longest(every_new, MAX_CANDIDATES, cache))
    if not candidates:
        return ExtractiveSummary(heading, ()), 0
    bullets = [c.bullet() for c in candidates]
    costs = np.asarray(counter.count_texts(["\n" + b for b in bullets]), dtype=np.int64)
    budget = max_summary_tokens - counter.count_text(heading)
    row = {c.text.casefold(): i for i, c in enumerate(corpus)}  # `_dedupe`'s key: one row per sentence
    span = SpanWords([cache.words(c.text) for c in corpus], [row[c.text.casefold()] for c in candidates])
    preferred = np.asarray(
        [long_enough(c.text, PREFERRED_WORDS, PREFERRED_IDEOGRAPHS, cache.words) for c in candidates]
    )
    chosen = _select(span.tfidf(), costs, budget, preferred, span.specificity())
    text = heading
    while chosen:  # BPE counts are not exactly additive: check the whole text
        text = _render(heading, [bullets[i] for i in sorted(chosen)])
        if counter.count_text(text) <= max_summary_tokens:
            break
        chosen.pop()  # the last chosen is the least valuable
        text = heading
    return ExtractiveSummary(text, tuple(candidates[i].source for i in sorted(chosen))), len(candidates)


class _WordCache:
    """`lexical.words` of each distinct sentence, computed once per summary."""

    def __init__(self) -> None:
        self._words: dict[str, list[str]] = {}

    def words(self, sentence: str) -> list[str]:
        found = self._words.get(sentence)
        if found is None:
            found = self._words[sentence] = words(sentence)
        return found


def _message_candidates(
    messages: Sequence[ContextMessage],
    *,
    min_words: int = MIN_WORDS,
    min_ideographs: int = MIN_IDEOGRAPHS,
    words_of: Callable[[str], list[str]] = words,
) -> list[_Candidate]:
    out: list[_Candidate] = []
    for index, message in enumerate(messages):
        speaker = message.name or message.role.value
        day = message.created_at.astimezone(UTC).date().isoformat() if message.created_at is not None else ""
        for block in message.blocks:
            if isinstance(block, TextBlock):
                sentences = split_sentences(
                    block.text, min_words=min_words, min_ideographs=min_ideographs, words_of=words_of
                )
                out.extend(_Candidate(speaker, day, s, index) for s in sentences)
            elif isinstance(block, ToolResultBlock):
                first = next((line.strip() for line in block.output.splitlines() if line.strip()), "")
                sentence = " ".join(first.split())
                if long_enough(sentence, min_words, min_ideographs):
                    out.append(_Candidate(block.name or speaker, day, cap(sentence), index))
    return out


def _previous_candidates(summary: str) -> list[_Candidate]:
    """Bullet lines of a previous summary (an extractive one keeps its [Speaker, day]
    tags); a summary without bullets contributes its sentences."""
    lines = [line for line in summary.splitlines() if not line.lstrip().startswith("#")]
    bullets = [m.group(1) for line in lines if (m := _BULLET.match(line))]
    out: list[_Candidate] = []
    if not bullets:
        return [_Candidate("", "", s) for s in split_sentences("\n".join(lines))]
    for bullet in bullets:
        if not substantive(bullet):  # "(none)", "N/A", "无": placeholders of a structured summary
            continue
        tagged = _TAGGED.match(bullet)
        if tagged is not None:
            out.append(_Candidate(tagged["speaker"].strip(), tagged["day"] or "", cap(tagged["text"].strip())))
        else:
            out.append(_Candidate("", "", cap(" ".join(bullet.split()))))
    return out


def _dedupe(candidates: list[_Candidate]) -> list[_Candidate]:
    seen: set[str] = set()
    out: list[_Candidate] = []
    for c in candidates:
        key = c.text.casefold()
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _select(
    vectors: TfIdfVectors, costs: np.ndarray, budget: int, preferred: np.ndarray, relevance: np.ndarray
) -> list[int]:
    """Indices chosen by MMR over *relevance* (in [0, 1]) and the tf-idf cosines of
    *vectors*, in the order chosen, whose costs sum to at most *budget*; *preferred*
    ones (a bool mask) before any other."""
    n = len(vectors)
    redundancy = np.zeros(n, dtype=np.float64)  # max cosine to a chosen sentence
    available = costs <= budget
    chosen: list[int] = []
    remaining = budget
    while True:
        available &= costs <= remaining
        if not available.any():
            return chosen
        score = MMR_LAMBDA * relevance - (1.0 - MMR_LAMBDA) * redundancy
        score = np.where(preferred, score, score - 4.0)  # scores lie in [-0.3, 0.7]
        best = int(np.argmax(np.where(available, score, -np.inf)))
        chosen.append(best)
        remaining -= int(costs[best])
        available[best] = False
        redundancy = np.maximum(redundancy, vectors.similarity_to(best))
        available &= redundancy < NEAR_DUPLICATE_COSINE


def _render(heading: str, bullets: list[str]) -> str:
    return "\n".join([heading, *bullets])


def _longest(candidates: list[_Candidate], limit: int, cache: _WordCache) -> list[_Candidate]:
    """At most *limit* candidates: the longest by words (each ideograph one word), in
    their original order."""
    if len(candidates) <= limit:
        return candidates
    size = np.fromiter((len(cache.words(c.text)) for c in candidates), dtype=np.int64, count=len(candidates))
    keep = np.zeros(len(candidates), dtype=bool)
    keep[np.argsort(-size, kind="stable")[:limit]] = True  # ties: the earlier first
    return [c for c, kept in zip(candidates, keep.tolist(), strict=True) if kept]
