"""A hit's absolute relevance (0..1), beside its rank score.

The rank score (`score`) is relative to the query's candidates: the best candidate scores 1
whatever it is, so a threshold on it can never say "nothing relevant is stored". The
relevance reads two signals that mean the same for every query and workspace:

- the **cosine** of the query's and the memory's vectors, on the embedding model's own
  scale (hence a calibration per model: `memplane.server.embedding.calibration`);
- the **lexical coverage**: the hit's BM25 over the BM25 of a memory of average length
  holding each of the query's lexemes once (the sum of their IDFs), clipped to 0..1 —
  the share of the query's words, weighted by rarity, the memory holds;

and maps them through the model's logistic. Without a query vector (lexical mode) the
relevance is the coverage itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memplane.server.embedding.calibration import RelevanceCalibration


@dataclass(frozen=True)
class Relevance:
    """A hit's relevance and the signals it was computed from (cosine 0 and coverage 0
    where the signal is off)."""

    score: float = 0.0
    cosine: float = 0.0
    coverage: float = 0.0


def coverage(bm25: float | None, lexical_max: float | None) -> float:
    """*bm25* over the query's BM25 scale *lexical_max*, clipped to 0..1 (0 without either)."""
    if not bm25 or not lexical_max or lexical_max <= 0:
        return 0.0
    return min(1.0, max(0.0, bm25 / lexical_max))


def relevance(
    calibration: RelevanceCalibration, cosine: float | None, bm25: float | None, lexical_max: float | None
) -> Relevance:
    """The relevance of a hit with *cosine* (None: no query vector), BM25 *bm25* (None: not a
    lexical candidate) for a query whose BM25 scale is *lexical_max*."""
    cov = coverage(bm25, lexical_max)
    if cosine is None:
        return Relevance(score=cov, cosine=0.0, coverage=cov)
    z = calibration.bias + calibration.cosine_weight * cosine + calibration.coverage_weight * cov
    score = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
    return Relevance(score=score, cosine=cosine, coverage=cov)
