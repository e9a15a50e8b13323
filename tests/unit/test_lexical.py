"""The extractive summariser's word statistics (`compaction.lexical`) against their
definitions written out naively, and the sentence splitter's cut points."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from memplane.server.compaction.lexical import SpanWords, words
from memplane.server.compaction.sentences import split_sentences

CORPUS = [
    "Alice moved to Lisbon in 2021 and loves the city.",
    "I moved too, but to Porto.",
    "the city of Lisbon is hilly and the trams are old",
    "We took tram 28 across the old town of Lisbon.",
    "Loves the city, hates the hills!",
    "我们计划把计费服务迁移到 PostgreSQL 16。",
    "",
]


def naive_specificity(sentence: list[str], corpus: list[list[str]]) -> float:
    """Mean over the words of log(N/df)/log(N), numbers and proper nouns (not first, not "I") 1."""
    n = len(corpus)
    df = Counter(w for s in corpus for w in {x.casefold() for x in s})
    scores = [
        1.0
        if w[0].isdigit() or (j > 0 and w[0].isupper() and w != "I")
        else min(1.0, math.log(n / max(df[w.casefold()], 1)) / math.log(n))
        for j, w in enumerate(sentence)
    ]
    return sum(scores) / len(scores) if scores else 0.0


def naive_tfidf(sentence: list[str], corpus: list[list[str]]) -> dict[str, float]:
    """(1 + ln tf) * (ln((1 + N) / (1 + df)) + 1), L2-normalised, over folded words."""
    n = len(corpus)
    df = Counter(w for s in corpus for w in {x.casefold() for x in s})
    tf = Counter(w.casefold() for w in sentence)
    weights = {w: (1 + math.log(k)) * (math.log((1 + n) / (1 + df[w])) + 1) for w, k in tf.items()}
    norm = math.sqrt(sum(v * v for v in weights.values())) or 1.0
    return {w: v / norm for w, v in weights.items()}


def test_words_split_ideographs_and_keep_case() -> None:
    assert words("Alice moved to Lisbon in 2021.") == ["Alice", "moved", "to", "Lisbon", "in", "2021"]
    assert words("迁移到 PostgreSQL 16。") == ["迁", "移", "到", "PostgreSQL", "16"]
    assert words("snake_case-words") == ["snake", "case", "words"]


def test_span_words_match_the_definitions() -> None:
    corpus = [words(s) for s in CORPUS]
    candidates = [0, 2, 3, 5, 6]
    span = SpanWords(corpus, candidates)
    expected = [naive_specificity(corpus[i], corpus) for i in candidates]
    assert span.specificity() == pytest.approx(expected)
    vectors = span.tfidf()
    dense = [naive_tfidf(corpus[i], corpus) for i in candidates]
    for i in range(len(candidates)):
        cosines = [sum(v * other.get(w, 0.0) for w, v in dense[i].items()) for other in dense]
        assert vectors.similarity_to(i) == pytest.approx(cosines)
    assert vectors.similarity_to(0)[0] == pytest.approx(1.0)
    assert vectors.similarity_to(4).tolist() == [0.0] * 5  # no words: the zero vector


def test_a_single_sentence_has_no_specificity() -> None:
    span = SpanWords([words("Only one sentence here.")], [0])
    assert span.specificity().tolist() == [0.0]
    assert np.allclose(span.tfidf().similarity_to(0), [1.0])


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Really?! Yes it is. No!! it is not", ["Really?!", "Yes it is.", "No!!", "it is not"]),
        ('He said "go now." Then we all left.', ['He said "go now."', "Then we all left."]),
        ("She did it (really.) and then? We went home.", ["She did it (really.)", "and then?", "We went home."]),
        ("Wait... what did you say?  Fine by me.", ["Wait...", "what did you say?", "Fine by me."]),
        ("他说：“我们明天走。”然后离开了会议室。", ["他说：“我们明天走。”", "然后离开了会议室。"]),
        ("好的。」』下一句在这里！", ["好的。」", "』下一句在这里！"]),  # one closing quote stays with it
    ],
)
def test_sentences_end_after_a_mark_and_keep_one_closing_quote(text: str, sentences: list[str]) -> None:
    assert split_sentences(text, min_words=1, min_ideographs=1) == sentences
