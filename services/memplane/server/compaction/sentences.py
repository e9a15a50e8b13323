"""Sentences of a message, for the extractive summariser: split at newlines and sentence
ends in English and Chinese, fragments dropped, long sentences cut.

The splitting rules are `split_sentences`'s docstring. Speed matters (a 128k-token span
holds ~8,000 sentences and PrepareContext splits them on every compaction): the sentence
ends are found by a pattern that starts with the end mark (the regex engine only tries
those characters), the abbreviation check looks at a sentence's last characters only,
and a caller that will need each sentence's words anyway passes a cache as *words_of*,
so no sentence is scanned for words twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memplane.server.compaction.lexical import words
from memplane.text.language import IDEOGRAPH, ideograph_count

MIN_WORDS = 3
"""Shortest kept sentence without CJK, in words."""
MIN_IDEOGRAPHS = 4
"""Shortest kept sentence in Chinese, in ideographs."""
MAX_SENTENCE_CHARS = 400
"""Longer sentences are cut to this many characters (with "…") so one cannot eat the budget."""

_CUT = re.compile(
    r"[。！？][”」』）’]?\s*"  # noqa: RUF001 - a Chinese sentence end, its closing quote, any space
    r"|[.!?][\"'”’)\]]?\s+"  # noqa: RUF001 - an English sentence end, its closing quote, then space
)
"""Where a sentence ends: the end mark and one closing quote stay with it, the space
after is dropped. It starts with the end mark, so the regex engine only tries the
marks (a pattern led by a lookbehind is tried at every character: 2.4x slower)."""
_CLOSERS = frozenset("\"'”’)]」』）")  # noqa: RUF001 - closing quotes and brackets of both languages
_ABBREVIATION = re.compile(r"(?:\b(?i:e\.g|i\.e|etc|vs|cf|approx|mr|mrs|ms|dr|prof|fig)|(?<![^\W\d_])[A-Z])\.$")
_LEADING_MARK = re.compile(r"^\s*(?:[-*+•>#]+|\d{1,3}[.)])\s+")  # list bullets, quotes, headings, numbering
_WORD = re.compile(r"[^\W_]+")


def split_sentences(
    text: str,
    *,
    min_words: int = MIN_WORDS,
    min_ideographs: int = MIN_IDEOGRAPHS,
    words_of: Callable[[str], list[str]] = words,
) -> list[str]:
    """Sentences of *text*: split at newlines (a leading list bullet, quote mark,
    heading mark or number is dropped), after `.!?` followed by whitespace (not after
    "e.g.", "Dr.", "etc." and the like, nor an initial such as "J.") and after the
    Chinese U+3002 / U+FF01 / U+FF1F (closing quotes stay with their sentence);
    whitespace collapsed; fragments under *min_words* words and *min_ideographs*
    ideographs dropped; sentences over 400 characters cut with "…". *words_of* gives
    a sentence's `lexical.words` (a cache may stand in for it)."""
    out: list[str] = []
    for raw in text.splitlines():
        line = _LEADING_MARK.sub("", raw)
        pending = ""
        for piece in _pieces(line):
            sentence = f"{pending} {piece}" if pending else piece
            # "e.g." or an initial "J." ends no sentence (the pattern is anchored at the end:
            # only the last 8 characters, and what precedes them, are looked at).
            if sentence.endswith(".") and _ABBREVIATION.search(sentence, max(0, len(sentence) - 8)):
                pending = sentence
                continue
            pending = ""
            out.append(" ".join(sentence.split()))
        if pending:
            out.append(" ".join(pending.split()))
    return [cap(s) for s in out if long_enough(s, min_words, min_ideographs, words_of)]


def _pieces(line: str) -> list[str]:
    """*line* cut after each sentence end (`_CUT`), the space after it dropped; the last
    piece is the rest of the line (empty when the line ends with a sentence end)."""
    out: list[str] = []
    start = 0
    for cut in _CUT.finditer(line):
        stop = cut.start() + 1  # the end mark, and the closing quote the match took
        if stop < cut.end() and line[stop] in _CLOSERS:
            stop += 1
        out.append(line[start:stop])
        start = cut.end()
    out.append(line[start:])
    return out


def long_enough(
    sentence: str,
    min_words: int = MIN_WORDS,
    min_ideographs: int = MIN_IDEOGRAPHS,
    words_of: Callable[[str], list[str]] = words,
) -> bool:
    """At least *min_ideographs* ideographs, or at least *min_words* other words;
    *words_of* gives the sentence's `lexical.words` (used for ASCII text only)."""
    if sentence.isascii():  # no ideographs: every word counts
        return len(words_of(sentence)) >= min_words
    if ideograph_count(sentence) >= min_ideographs:
        return True
    return len(_WORD.findall(IDEOGRAPH.sub(" ", sentence))) >= min_words


def cap(sentence: str) -> str:
    return sentence if len(sentence) <= MAX_SENTENCE_CHARS else sentence[: MAX_SENTENCE_CHARS - 1].rstrip() + "…"
