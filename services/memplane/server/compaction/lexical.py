"""Word statistics of a span's sentences, for the extractive summariser: no model call.

- `words`: the words of a sentence (letters and digits; each ideograph one word).
- `SpanWords`: the span's sentences (the corpus) as arrays of word ids (words folded
  with `str.casefold`) and the candidates of a summary among them, with
  - `specificity()`: how specific each candidate's words are within the span, the mean
    inverse document frequency of its words (Spärck Jones, "A statistical interpretation
    of term specificity and its application in retrieval", J. Documentation 1972);
  - `tfidf()`: sparse tf-idf vectors of the candidates (`TfIdfVectors`) with the cosine
    of one candidate to all, the sentence representation MMR was introduced with
    (Carbonell & Goldstein, "The use of MMR, diversity-based reranking for reordering
    documents and producing summaries", SIGIR 1998). Weights are sublinear term
    frequency times smoothed inverse document frequency, `(1 + ln tf) * (ln((1 + N) /
    (1 + df)) + 1)` (Salton & Buckley, "Term-weighting approaches in automatic text
    retrieval", IP&M 1988; the smoothing is scikit-learn's `TfidfVectorizer` default, so
    a word in every sentence still counts), rows L2-normalised.

Costs: one Python pass over the words to give them ids (a dict look-up each), then numpy
over the arrays (sorting the word occurrences once). `similarity_to(i)` touches the
posting lists of candidate i's words only, so choosing a summary's ~100 sentences among
thousands takes milliseconds. A 128k-token span (~8,000 sentences, ~130k words) takes
about 0.1 s on one core.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from memplane.text.language import IDEOGRAPH

_WORD = re.compile(r"[^\W_]+")


def words(sentence: str) -> list[str]:
    """The words of *sentence* in order, as written (case kept); each ideograph is one word."""
    if sentence.isascii():  # no ideograph to split out
        return _WORD.findall(sentence)
    return _WORD.findall(IDEOGRAPH.sub(lambda m: f" {m.group()} ", sentence))


class _Encoded:
    """Sentences as flat arrays, one entry per word occurrence in sentence order:
    `rows` (int64, the sentence's index), `terms` (int64, the folded word's id) and
    `special` (bool: the word starts with a digit, or is capitalised and not its
    sentence's first word, "I" excepted: a number or a proper noun)."""

    def __init__(self, rows: np.ndarray, terms: np.ndarray, special: np.ndarray, count: int) -> None:
        self.rows = rows
        self.terms = terms
        self.special = special
        self.count = count


class _Vocabulary:
    """Ids of folded words, and per word as written its folded id and kind (0 plain, 1
    starts with a digit, 2 capitalised and not "I")."""

    def __init__(self) -> None:
        self._written: dict[str, int] = {}  # word as written -> index into the lists below
        self._folded: dict[str, int] = {}
        self._term: list[int] = []
        self._kind: list[int] = []

    def __len__(self) -> int:
        return len(self._folded)

    def encode(self, sentences: Sequence[Sequence[str]]) -> _Encoded:
        """*sentences* (each given as its `words`) as flat arrays."""
        written = self._written
        known = len(written)
        codes = [written.setdefault(w, len(written)) for sentence in sentences for w in sentence]
        for word in list(written)[known:]:  # new words, in the order of their ids
            self._term.append(self._folded.setdefault(word.casefold(), len(self._folded)))
            self._kind.append(1 if word[0].isdigit() else 2 if word[0].isupper() and word != "I" else 0)
        lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
        rows = np.repeat(np.arange(len(sentences), dtype=np.int64), lengths)
        index = np.asarray(codes, dtype=np.int64)
        terms = np.asarray(self._term, dtype=np.int64)[index]
        kind = np.asarray(self._kind, dtype=np.int8)[index]
        first = np.ones(len(codes), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        special = (kind == 1) | ((kind == 2) & ~first)
        return _Encoded(rows, terms, special, len(sentences))


class SpanWords:
    """The sentences of a span (the corpus, each given as its `words`) and the candidates
    of a summary among them (*candidates*: indices into *corpus*), with document
    frequencies counted over the corpus (N = its number of sentences)."""

    def __init__(self, corpus: Sequence[Sequence[str]], candidates: Sequence[int]) -> None:
        vocabulary = _Vocabulary()
        documents = vocabulary.encode(corpus)
        self._size = len(vocabulary)
        self._n = documents.count
        # Distinct (sentence, word) pairs of the corpus, counted per word.
        pairs = np.unique(documents.rows * self._size + documents.terms)
        self._df = np.bincount(pairs % max(self._size, 1), minlength=self._size)
        # The candidates' words: their corpus rows' ranges of the flat arrays, in order.
        chosen = np.asarray(candidates, dtype=np.int64)
        starts = np.searchsorted(documents.rows, chosen, side="left")
        lengths = np.searchsorted(documents.rows, chosen, side="right") - starts
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        flat = np.arange(int(lengths.sum()), dtype=np.int64) + offsets
        rows = np.repeat(np.arange(len(chosen), dtype=np.int64), lengths)
        self._candidates = _Encoded(rows, documents.terms[flat], documents.special[flat], len(chosen))

    def specificity(self) -> np.ndarray:
        """Per candidate, float64 of shape (candidates,) in [0, 1]: the mean over its
        words of `log(N / df) / log(N)`, a number or proper noun counting 1; 0 for a
        candidate without words; all zeros when the corpus has fewer than two sentences."""
        c = self._candidates
        if self._n < 2:
            return np.zeros(c.count, dtype=np.float64)
        idf = np.log(self._n / np.maximum(self._df[c.terms], 1)) / np.log(self._n)
        scores = np.where(c.special, 1.0, np.minimum(idf, 1.0))
        total = np.bincount(c.rows, weights=scores, minlength=c.count)
        lengths = np.bincount(c.rows, minlength=c.count)
        return np.divide(total, lengths, out=np.zeros(c.count, dtype=np.float64), where=lengths > 0)

    def tfidf(self) -> TfIdfVectors:
        """The candidates' tf-idf vectors (weights as in the module docstring)."""
        c = self._candidates
        size = max(self._size, 1)
        pairs, tf = np.unique(c.rows * size + c.terms, return_counts=True)  # sorted: by row, then word
        rows, terms = pairs // size, pairs % size
        idf = np.log((1 + self._n) / (1 + self._df[terms])) + 1.0
        weights = (1.0 + np.log(tf)) * idf
        norms = np.sqrt(np.bincount(rows, weights=weights * weights, minlength=c.count))
        weights = weights / np.where(norms > 0, norms, 1.0)[rows]
        return TfIdfVectors(rows, terms, weights, c.count, self._size)


class TfIdfVectors:
    """Sparse, L2-normalised vectors of *count* sentences over *size* words, given as
    (row, term, weight) entries sorted by row (at most one per pair), stored both by
    sentence (CSR) and by word (posting lists) for one-to-all cosines. A sentence without
    words has the zero vector (cosine 0 to everything)."""

    def __init__(self, rows: np.ndarray, terms: np.ndarray, weights: np.ndarray, count: int, size: int) -> None:
        self._n = count
        self._row_start = np.searchsorted(rows, np.arange(count + 1))
        self._row_terms = terms
        self._row_weights = weights
        order = np.argsort(terms, kind="stable")
        self._term_start = np.searchsorted(terms[order], np.arange(size + 1))
        self._term_rows = rows[order]
        self._term_weights = weights[order]

    def __len__(self) -> int:
        return self._n

    def similarity_to(self, i: int) -> np.ndarray:
        """Cosine of every sentence to sentence *i*, float64 of shape (len(self),), in [0, 1]."""
        lo, hi = self._row_start[i], self._row_start[i + 1]
        terms, weights = self._row_terms[lo:hi], self._row_weights[lo:hi]
        starts, stops = self._term_start[terms], self._term_start[terms + 1]
        lengths = stops - starts
        # Indices of every posting of the sentence's words, without a Python loop.
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        postings = np.arange(int(lengths.sum()), dtype=np.int64) + offsets
        products = self._term_weights[postings] * np.repeat(weights, lengths)
        return np.bincount(self._term_rows[postings], weights=products, minlength=self._n)
