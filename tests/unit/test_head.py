"""The head of a long text (memplane.server.embedding.head), with a word-counting tokenizer."""

from __future__ import annotations

from memplane.server.embedding.head import CHARS_PER_TOKEN_BOUND, head


class _Words:
    """Counts whitespace-separated words plus 2 (as <s> and </s>), and records the
    lengths of the prefixes it was asked to count."""

    def __init__(self) -> None:
        self.counted: list[int] = []

    def __call__(self, text: str) -> int:
        self.counted.append(len(text))
        return len(text.split()) + 2


def _words(n: int) -> str:
    return " ".join(f"word{i}" for i in range(n))


def test_a_text_that_fits_is_returned_whole() -> None:
    for words in (100, 400, 480):  # 400 words: ~3,100 characters, more than the first guess
        text = _words(words)
        assert head(text, 512, _Words()) == text


def test_a_text_at_the_limit_keeps_nearly_all_of_it() -> None:
    text = _words(510)  # 510 words + 2 = 512 tokens exactly
    count = _Words()
    cut = head(text, 512, count)
    assert text.startswith(cut)
    assert 0.95 * 512 <= count(cut) <= 512


def test_a_short_text_is_not_even_counted() -> None:
    count = _Words()
    assert head("a short note", 512, count) == "a short note"
    assert count.counted == []


def test_a_long_text_is_cut_to_a_prefix_of_at_most_max_tokens_ending_at_a_word() -> None:
    text = _words(8_000)
    count = _Words()
    cut = head(text, 512, count)
    assert text.startswith(cut)
    assert count(cut) <= 512
    assert count(cut) >= 0.95 * 512  # nearly all the model can read is used
    assert text[len(cut)] == " "  # the cut ends a word, never inside one
    assert len(count.counted) <= 6  # a few counts, not a search over every length
    assert max(count.counted) <= 512 * CHARS_PER_TOKEN_BOUND  # never the whole 8,000 words


def test_text_without_spaces_is_cut_at_a_character() -> None:
    text = "字" * 5_000

    def per_char(prefix: str) -> int:
        return len(prefix) + 2

    cut = head(text, 512, per_char)
    assert text.startswith(cut)
    assert 0.95 * 512 <= per_char(cut) <= 512


def test_zero_max_tokens_keeps_the_whole_text() -> None:
    text = _words(8_000)
    count = _Words()
    assert head(text, 0, count) == text
    assert count.counted == []


def test_nothing_fits_gives_an_empty_head() -> None:
    assert head("x" * 1_000, 4, lambda prefix: 10) == ""


def test_a_short_text_of_many_tokens_a_character_is_still_cut() -> None:
    """A byte-level BPE (cl100k_base) may make several tokens of one character: a text of
    fewer characters than half the limit is counted, and cut, when told so."""
    text = "字" * 250  # 3 tokens a character here: 750 tokens

    def count(prefix: str) -> int:
        return 3 * len(prefix)

    assert head(text, 512, count) == text  # one token a character assumed: not even counted
    cut = head(text, 512, count, max_tokens_per_char=4)
    assert text.startswith(cut)
    assert 0.95 * 512 <= count(cut) <= 512
